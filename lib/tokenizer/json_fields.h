// Typed access to fields of the tokenizer's JSON files, failing with one line that names the file
// and the field path (e.g. "tokenizer.json: model.merges[3]: expected a string").
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace rqat::tokenizer::json_fields {

using Json = nlohmann::json;

// Parses a file (an unordered json: vocabularies have 10^5 keys, too many for ordered_json).
Json read(const std::filesystem::path& path);

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& what);

std::string join(const std::string& path, const std::string& key);  // "a.b", or "b" at the root

const Json& object(const Json& parent, const std::string& key, const std::string& file,
                   const std::string& path);
const Json* optional_member(const Json& parent,
                            const std::string& key);  // nullptr when absent or null
std::string string(const Json& parent, const std::string& key, const std::string& file,
                   const std::string& path);
std::optional<std::string> optional_string(const Json& parent, const std::string& key,
                                           const std::string& file, const std::string& path);
bool boolean(const Json& parent, const std::string& key, bool fallback, const std::string& file,
             const std::string& path);
int64_t integer(const Json& parent, const std::string& key, const std::string& file,
                const std::string& path);

}  // namespace rqat::tokenizer::json_fields
