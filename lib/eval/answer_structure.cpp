// Structure of answers: bracket-depth scans that treat (, [ and { alike (so the half-open
// interval [1,2) nests correctly) and LaTeX's \{ \} as set braces.
#include "eval/answer_structure.h"

#include <cctype>

namespace rqat::eval {

namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Index of the bracket closing the one at 0 (any of )]} closes any of ([{), or npos.
size_t closing_of_first(std::string_view s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      depth += s[i + 1] == '{' ? 1 : -1;
      ++i;
      if (depth == 0) return i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0) return i;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::vector<std::string> split_top_level(std::string_view text, std::string_view sep) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '{' || text[i + 1] == '}')) {
      depth += text[i + 1] == '{' ? 1 : -1;
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{')
      ++depth;
    else if (c == ')' || c == ']' || c == '}')
      --depth;
    else if (depth == 0 && text.substr(i, sep.size()) == sep) {
      // a command separator must not be a prefix of a longer command (\cup vs \cupdot)
      if (sep[0] == '\\' && i + sep.size() < text.size() &&
          std::isalpha(static_cast<unsigned char>(text[i + sep.size()])))
        continue;
      out.push_back(trim(text.substr(start, i - start)));
      start = i + sep.size();
      i = start - 1;
    }
  }
  out.push_back(trim(text.substr(start)));
  return out;
}

Structure split_structure(std::string_view answer) {
  std::string s = trim(answer);
  Structure st;

  auto unions = split_top_level(s, "\\cup");
  if (unions.size() > 1) {
    st.kind = Structure::Kind::union_of;
    for (const auto& part : unions) st.parts.push_back(split_structure(part));
    return st;
  }

  if (starts_with(s, "\\begin{") && s.find("matrix}") != std::string::npos) {
    size_t body_start = s.find('}') + 1;
    size_t body_end = s.rfind("\\end{");
    // The whole answer must be the environment: "\begin{pmatrix}..\end{pmatrix}+1" is not a matrix.
    bool whole = body_end != std::string::npos && s.find('}', body_end) == s.size() - 1;
    if (whole && body_end > body_start) {
      st.kind = Structure::Kind::matrix;
      for (const auto& row :
           split_top_level(std::string_view(s).substr(body_start, body_end - body_start), "\\\\")) {
        if (row.empty()) continue;
        st.rows.push_back(split_top_level(row, "&"));
      }
      return st;
    }
  }

  if (starts_with(s, "\\{") && ends_with(s, "\\}") && closing_of_first(s) == s.size() - 1) {
    st.kind = Structure::Kind::set;
    std::string inner = s.substr(2, s.size() - 4);
    if (!trim(inner).empty()) st.items = split_top_level(inner, ",");
    return st;
  }

  auto items = split_top_level(s, ",");
  if (items.size() > 1) {
    st.kind = Structure::Kind::list;
    st.items = std::move(items);
    return st;
  }

  if (s.size() >= 2 && (s[0] == '(' || s[0] == '[') && (s.back() == ')' || s.back() == ']') &&
      closing_of_first(s) == s.size() - 1) {
    auto inner = split_top_level(std::string_view(s).substr(1, s.size() - 2), ",");
    if (inner.size() > 1) {
      st.kind = Structure::Kind::ordered;
      st.open = s[0];
      st.close = s.back();
      st.items = std::move(inner);
      return st;
    }
  }

  auto pm = split_top_level(s, "\\pm");
  if (pm.size() == 2 && !pm[1].empty()) {
    st.kind = Structure::Kind::list;
    std::string a = pm[0].empty() ? "0" : pm[0];
    st.items = {"(" + a + ")+(" + pm[1] + ")", "(" + a + ")-(" + pm[1] + ")"};
    return st;
  }

  st.items = {s};
  return st;
}

}  // namespace rqat::eval
