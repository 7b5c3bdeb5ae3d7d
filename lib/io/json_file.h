// JSON files with errors that name the file (and, for fields, the key).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rqat::io {

using Json = nlohmann::ordered_json;

// How deeply arrays and objects may nest in any JSON rqat reads: Hugging Face files nest fewer
// than 20 levels, and a hostile file of 10^5 levels would overflow the stack in the recursive
// destruction and walks of the parsed tree (docs/reliability.md).
inline constexpr std::size_t kMaxJsonDepth = 512;

// Fails with "WHERE: JSON nested deeper than 512 levels (at byte N)" before any tree is built: a
// linear scan of the brackets outside strings. Every reader below calls it; call it before
// parsing JSON text from elsewhere.
void check_json_nesting(std::string_view text, std::string_view where);

Json read_json_file(const std::filesystem::path& path);
// The file's JSON, or null when it is absent, unreadable or not whole JSON (a small status file
// another process is replacing: callers show nothing rather than fail).
Json read_json_file_or_null(const std::filesystem::path& path);
// Same, without key order: much faster for large objects such as a 150k-entry vocabulary.
nlohmann::json read_unordered_json_file(const std::filesystem::path& path);
void write_json_file(const std::filesystem::path& path, const Json& value);  // atomic, indented

}  // namespace rqat::io
