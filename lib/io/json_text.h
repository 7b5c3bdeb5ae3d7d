// Parsing JSON text held in memory (a file's contents, a JSONL line, a safetensors header). Every
// defect comes back as one line for the caller to put after the file's name, whatever nlohmann
// would have thrown: syntax errors, numbers beyond double's range ("1e999", an out_of_range
// exception that a catch of parse_error alone lets through), and nesting past kMaxJsonDepth,
// checked before any tree is built.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rqat::io {

// "JSON nested deeper than 512 levels (at byte N)", or nullopt. A linear scan of the brackets
// outside strings (json_file.h's check_json_nesting throws it).
std::optional<std::string> json_nesting_problem(std::string_view text);

// Parses `text` into `out`; returns what is wrong with it, or nullopt when it parsed.
template <class JsonType>
std::optional<std::string> parse_json_into(std::string_view text, JsonType& out) {
  if (auto problem = json_nesting_problem(text)) return problem;
  try {
    out = JsonType::parse(text);
    return std::nullopt;
  } catch (const nlohmann::json::parse_error& e) {
    return "invalid JSON at byte " + std::to_string(e.byte);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'": the part after the tag.
    const std::string_view what = e.what();
    const size_t tag_end = what.find("] ");
    return "invalid JSON: " +
           std::string(tag_end == std::string_view::npos ? what : what.substr(tag_end + 2));
  }
}

}  // namespace rqat::io
