// ASCII text helpers shared by answer extraction and normalization (answers are compared after
// LaTeX normalization, where only ASCII classes matter).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace rqat::eval::text {

inline bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
inline bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
inline bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

inline std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace rqat::eval::text
