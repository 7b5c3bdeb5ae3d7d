// See json_fields.h.
#include "io/json_fields.h"

#include <fmt/format.h>

#include "io/error.h"

namespace rqat::io {
namespace {

template <class T>
constexpr const char* kind_of() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, int64_t>) return "a whole number";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
  return "a value";
}

template <class T>
bool has_kind(const Json& v) {
  if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  if constexpr (std::is_same_v<T, int64_t>) return v.is_number_integer();
  if constexpr (std::is_same_v<T, double>) return v.is_number();
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!v.is_array()) return false;
    for (const auto& item : v)
      if (!item.is_string()) return false;
    return true;
  }
  return true;
}

// What was found, for the message: its kind and a short excerpt.
std::string found(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {} ({})", v.is_array() || v.is_object() ? "an" : "a", v.type_name(), text);
}

}  // namespace

std::string json_path(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

std::string json_path(std::string_view parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

template <class T>
T json_as(const Json& value, std::string_view path) {
  if (!has_kind<T>(value)) fail("{}: expected {}, got {}", path, kind_of<T>(), found(value));
  if constexpr (std::is_same_v<T, Json>)
    return value;
  else
    return value.get<T>();
}

template <class T>
T json_field(const Json& obj, std::string_view key, std::string_view parent) {
  if (!obj.is_object())
    fail("{}: expected an object, got {}", parent.empty() ? "the file" : parent, found(obj));
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}: missing", json_path(parent, key));
  return json_as<T>(*it, json_path(parent, key));
}

template <class T>
T json_field_or(const Json& obj, std::string_view key, T fallback, std::string_view parent) {
  if (!obj.is_object())
    fail("{}: expected an object, got {}", parent.empty() ? "the file" : parent, found(obj));
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return json_as<T>(*it, json_path(parent, key));
}

std::vector<std::pair<std::string, std::string>> json_string_map(const Json& obj,
                                                                 std::string_view key,
                                                                 std::string_view parent,
                                                                 JsonPresence presence) {
  const Json map = presence == JsonPresence::kRequired
                       ? json_field<Json>(obj, key, parent)
                       : json_field_or<Json>(obj, key, Json::object(), parent);
  const std::string path = json_path(parent, key);
  if (!map.is_object()) fail("{}: expected an object, got {}", path, found(map));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : map.items())
    out.emplace_back(k, json_as<std::string>(v, json_path(path, k)));
  return out;
}

#define RQAT_JSON_FIELD(T)                                                   \
  template T json_as<T>(const Json&, std::string_view);                      \
  template T json_field<T>(const Json&, std::string_view, std::string_view); \
  template T json_field_or<T>(const Json&, std::string_view, T, std::string_view);
RQAT_JSON_FIELD(std::string)
RQAT_JSON_FIELD(int64_t)
RQAT_JSON_FIELD(double)
RQAT_JSON_FIELD(bool)
RQAT_JSON_FIELD(std::vector<std::string>)
RQAT_JSON_FIELD(Json)
#undef RQAT_JSON_FIELD

}  // namespace rqat::io
