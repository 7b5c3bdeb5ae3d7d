// Parsing JSON text held in memory (a file's contents, a JSONL line, a safetensors header). Every
// defect comes back as one line for the caller to put after the file's name, whatever nlohmann
// would have thrown: syntax errors, numbers beyond double's range ("1e999", an out_of_range
// exception that a catch of parse_error alone lets through), and nesting past kMaxJsonDepth,
// checked before any tree is built.
#pragma once

#include <cstdint>
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

// The value of a JSON integer when it lies in [lo, hi]; nullopt for other values and non-integers.
// Positive JSON integers are stored unsigned (up to 2^64 - 1) and are compared as such: narrowed
// to int64 first, the largest would read back negative and pass a check for small values.
template <class JsonType>
std::optional<int64_t> json_integer_within(const JsonType& value, int64_t lo, int64_t hi) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.template get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (!value.is_number_integer()) return std::nullopt;
  const int64_t v = value.template get<int64_t>();
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace rqat::io
