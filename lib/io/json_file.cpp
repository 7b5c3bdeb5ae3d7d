// See json_file.h.
#include "io/json_file.h"

#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_text.h"

namespace rqat::io {

namespace {

template <class JsonType>
JsonType parse_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  JsonType json;
  if (auto problem = parse_json_into(buffer.str(), json)) fail("{}: {}", path.string(), *problem);
  return json;
}

}  // namespace

void check_json_nesting(std::string_view text, std::string_view where) {
  if (auto problem = json_nesting_problem(text)) fail("{}: {}", where, *problem);
}

std::optional<std::string> json_nesting_problem(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return fmt::format("JSON nested deeper than {} levels (at byte {})", kMaxJsonDepth, i);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // unbalanced text is the parser's to report
    }
  }
  return std::nullopt;
}

Json read_json_file(const std::filesystem::path& path) { return parse_json_file<Json>(path); }

Json read_json_file_or_null(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return nullptr;
  try {
    return read_json_file(path);
  } catch (const std::exception&) {
    return nullptr;
  }
}

nlohmann::json read_unordered_json_file(const std::filesystem::path& path) {
  return parse_json_file<nlohmann::json>(path);
}

void write_json_file(const std::filesystem::path& path, const Json& value) {
  write_text_atomically(path, value.dump(2) + "\n");
}

}  // namespace rqat::io
