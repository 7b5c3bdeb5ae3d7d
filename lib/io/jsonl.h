// JSON Lines input: one JSON object per line, blank lines skipped, errors as "FILE:N: ... on line
// N".
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/error.h"
#include "io/json_file.h"
#include "io/json_text.h"

namespace rqat::io {

// Calls visit(row, line_number) for every object line of `path`. JsonType is nlohmann::json, or
// nlohmann::ordered_json where the caller writes rows back and wants their key order kept.
template <class JsonType, class Visit>
void for_each_jsonl_object(const std::filesystem::path& path, Visit&& visit) {
  const std::string file = path.string();
  if (!std::filesystem::is_regular_file(path)) fail("{}: file not found", file);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", file);
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    JsonType row;
    // The file:line name is formatted only for a line that fails.
    if (auto problem = parse_json_into(line, row))
      fail("{}:{}: line {}: {}", file, number, number, *problem);
    if (!row.is_object()) fail("{}:{}: line {} is not a JSON object", file, number, number);
    visit(row, number);
  }
}

}  // namespace rqat::io
