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

// Length of the variable name that starts `s`: one letter or a command such as \theta (not
// \infty, \pi, \frac, \sqrt), with an optional subscript x_1 / x_{10}; 0 when there is none.
inline size_t variable_length(std::string_view s) {
  size_t i = 0;
  if (!s.empty() && s[0] == '\\') {
    ++i;
    while (i < s.size() && is_alpha(s[i])) ++i;
    const std::string_view name = s.substr(1, i - 1);
    if (name.empty() || name == "infty" || name == "pi" || name == "frac" || name == "sqrt") return 0;
  } else if (!s.empty() && is_alpha(s[0])) {
    i = 1;
  } else {
    return 0;
  }
  if (i < s.size() && s[i] == '_') {
    ++i;
    if (i < s.size() && s[i] == '{') {
      const size_t close = s.find('}', i);
      if (close == std::string_view::npos) return 0;
      i = close + 1;
    } else if (i < s.size()) {
      ++i;
    }
  }
  return i;
}

// True when `s` has a letter outside command names (x, f(x), a_1; not \infty, \frac{1}{2}).
inline bool has_variable_letter(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      while (i + 1 < s.size() && is_alpha(s[i + 1])) ++i;
      continue;
    }
    if (is_alpha(s[i])) return true;
  }
  return false;
}

}  // namespace rqat::eval::text
