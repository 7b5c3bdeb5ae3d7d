// JSON files with errors that name the file (and, for fields, the key).
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace rqat::io {

using Json = nlohmann::ordered_json;

Json read_json_file(const std::filesystem::path& path);
// Same, without key order: much faster for large objects such as a 150k-entry vocabulary.
nlohmann::json read_unordered_json_file(const std::filesystem::path& path);
void write_json_file(const std::filesystem::path& path, const Json& value);  // atomic, indented

}  // namespace rqat::io
