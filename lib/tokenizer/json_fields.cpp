// See json_fields.h.
#include "tokenizer/json_fields.h"

#include <fstream>
#include <sstream>

#include "io/error.h"
#include "io/json_file.h"

namespace rqat::tokenizer::json_fields {

Json read(const std::filesystem::path& path) { return io::read_unordered_json_file(path); }

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

}  // namespace rqat::tokenizer::json_fields
