// Fields of a parsed JSON file read with errors that name them: "stages[3].id: expected a string,
// got a number (5)" or "stages[3].id: missing", never a JSON library's own message. The caller
// adds the file's name (as read_plan does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/json_file.h"

namespace rqat::io {

// "PARENT.KEY" (or "KEY" at the top), and "PARENT[INDEX]".
std::string json_path(std::string_view parent, std::string_view key);
std::string json_path(std::string_view parent, std::size_t index);

// `value` at `path` as T (std::string, int64_t, double, bool, std::vector<std::string>, or Json for
// any value); rqat::Error naming the path, the kind expected and the kind found otherwise.
template <class T>
T json_as(const Json& value, std::string_view path);

// obj[key] as T; rqat::Error when obj is not an object, key is absent or of another kind.
template <class T>
T json_field(const Json& obj, std::string_view key, std::string_view parent);
// The same, with `fallback` when key is absent (or null).
template <class T>
T json_field_or(const Json& obj, std::string_view key, T fallback, std::string_view parent);

// Whether a field may be left out.
enum class JsonPresence { kOptional, kRequired };

// obj[key] (an object) as (key, string) pairs, in file order; when absent, an empty list if
// optional, else rqat::Error "PATH: missing".
std::vector<std::pair<std::string, std::string>> json_string_map(
    const Json& obj, std::string_view key, std::string_view parent,
    JsonPresence presence = JsonPresence::kOptional);

}  // namespace rqat::io
