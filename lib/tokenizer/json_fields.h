// Typed access to fields of the tokenizer's JSON files, failing with one line that names the file
// and the field path (e.g. "tokenizer.json: model.merges[3]: expected a string").
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rqat::tokenizer::json_fields {

using Json = nlohmann::json;

// Parses a file (an unordered json: vocabularies have 10^5 keys, too many for ordered_json).
Json read(const std::filesystem::path& path);
// Parses JSON text held in memory the same way (nesting checked first); `file` names it in errors.
Json parse(std::string_view text, const std::string& file);
// The whole content of a file ("FILE: cannot open" when it cannot be read).
std::string read_text(const std::filesystem::path& path);

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

// At most the first 40 bytes of a token for an error message, quoted ('abc', 'abc...'): a hostile
// vocabulary may hold a token of megabytes, and an error stays one short line.
std::string excerpt(std::string_view token);

// A token id: an integer in [0, 2^31). JSON numbers beyond int32 would otherwise wrap around
// silently into some other (possibly negative) id.
int32_t token_id(const Json& value, const std::string& file, const std::string& field);

}  // namespace rqat::tokenizer::json_fields
