// See json_fields.h.
#include "tokenizer/json_fields.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "io/error.h"
#include "io/json_file.h"
#include "io/json_text.h"

namespace rqat::tokenizer::json_fields {

Json read(const std::filesystem::path& path) { return io::read_unordered_json_file(path); }

Json parse(std::string_view text, const std::string& file) {
  Json json;
  if (auto problem = io::parse_json_into(text, json)) fail("{}: {}", file, *problem);
  return json;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void bad(const std::string& file, const std::string& field, const std::string& what) {
  fail("{}: {}: {}", file, field, what);
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

const Json* optional_member(const Json& parent, const std::string& key) {
  if (!parent.is_object()) return nullptr;
  const auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& object(const Json& parent, const std::string& key, const std::string& file,
                   const std::string& path) {
  const Json* value = optional_member(parent, key);
  if (value == nullptr) bad(file, join(path, key), "missing");
  if (!value->is_object()) bad(file, join(path, key), "expected an object");
  return *value;
}

std::string string(const Json& parent, const std::string& key, const std::string& file,
                   const std::string& path) {
  const Json* value = optional_member(parent, key);
  if (value == nullptr) bad(file, join(path, key), "missing");
  if (!value->is_string()) bad(file, join(path, key), "expected a string");
  return value->get<std::string>();
}

std::optional<std::string> optional_string(const Json& parent, const std::string& key,
                                           const std::string& file, const std::string& path) {
  const Json* value = optional_member(parent, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) bad(file, join(path, key), "expected a string or null");
  return value->get<std::string>();
}

bool boolean(const Json& parent, const std::string& key, bool fallback, const std::string& file,
             const std::string& path) {
  const Json* value = optional_member(parent, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) bad(file, join(path, key), "expected true or false");
  return value->get<bool>();
}

int64_t integer(const Json& parent, const std::string& key, const std::string& file,
                const std::string& path) {
  const Json* value = optional_member(parent, key);
  if (value == nullptr) bad(file, join(path, key), "missing");
  if (!value->is_number_integer()) bad(file, join(path, key), "expected an integer");
  return value->get<int64_t>();
}


std::string excerpt(std::string_view token) {
  constexpr size_t kShown = 40;
  if (token.size() <= kShown) return fmt::format("'{}'", token);
  // Cut at a character boundary so the message stays valid UTF-8 when the token is.
  size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(token[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("'{}...' ({} bytes)", token.substr(0, cut), token.size());
}

int32_t token_id(const Json& value, const std::string& file, const std::string& field) {
  if (!value.is_number_integer()) bad(file, field, "expected an integer id");
  const auto id = io::json_integer_within(value, 0, INT32_MAX);
  if (!id) bad(file, field, "id " + value.dump() + " is out of range (0 to 2^31 - 1)");
  return static_cast<int32_t>(*id);
}

}  // namespace rqat::tokenizer::json_fields
