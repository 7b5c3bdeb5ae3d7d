// See json_file.h.
#include "io/json_file.h"

#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/error.h"

namespace rqat::io {

namespace {

template <class JsonType>
JsonType parse_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return JsonType::parse(buffer.str());
  } catch (const typename JsonType::parse_error& e) {
    fail("{}: invalid JSON at byte {}", path.string(), e.byte);
  }
}

}  // namespace

Json read_json_file(const std::filesystem::path& path) { return parse_json_file<Json>(path); }

nlohmann::json read_unordered_json_file(const std::filesystem::path& path) {
  return parse_json_file<nlohmann::json>(path);
}

void write_json_file(const std::filesystem::path& path, const Json& value) {
  write_text_atomically(path, value.dump(2) + "\n");
}

}  // namespace rqat::io
