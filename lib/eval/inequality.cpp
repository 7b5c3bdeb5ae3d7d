// Reading an inequality as the interval of its subject's values: plain scans over the normalized
// text (no parser: bounds are compared later as the interval's items).
#include "eval/inequality.h"

#include <array>
#include <vector>

#include "eval/text_util.h"

namespace rqat::eval {

namespace {

struct Relation {
  bool less = true;     // '<' family (else '>')
  bool strict = true;   // '<' rather than '<='
  size_t at = 0;        // where the operator starts
  size_t length = 0;
};

struct Operator {
  std::string_view text;
  bool less;
  bool strict;
};

// Longest first, so "\leq" is not read as "\le" followed by "q".
constexpr std::array<Operator, 14> kOperators = {{
    {"\\leqslant", true, false}, {"\\geqslant", false, false}, {"\\leq", true, false},
    {"\\geq", false, false},     {"\\le", true, false},        {"\\ge", false, false},
    {"\\lt", true, true},        {"\\gt", false, true},        {"<=", true, false},
    {">=", false, false},        {"\u2264", true, false},      {"\u2265", false, false},
    {"<", true, true},           {">", false, true},
}};

// The relations outside braces and brackets, in order.
std::vector<Relation> relations(std::string_view s) {
  std::vector<Relation> out;
  int depth = 0;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    bool matched = false;
    if (depth == 0) {
      for (const auto& op : kOperators) {
        if (s.substr(i, op.text.size()) != op.text) continue;
        const size_t end = i + op.text.size();
        if (op.text[0] == '\\' && end < s.size() && text::is_alpha(s[end])) continue;  // \left
        out.push_back({op.less, op.strict, i, op.text.size()});
        i = end;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  return out;
}

// The subject of an inequality: a variable (x, x_1, \theta) or a function of one (f(x)); "|x|"
// or "2x+1" are not read as intervals of x.
bool is_subject(std::string_view s) {
  const size_t length = text::variable_length(s);
  if (length == 0) return false;
  if (length == s.size()) return true;
  return s[length] == '(' && s.back() == ')';
}

std::string interval(const std::string& low, bool low_closed, const std::string& high,
                     bool high_closed) {
  return std::string(low_closed ? "[" : "(") + low + "," + high + (high_closed ? "]" : ")");
}

// "x op bound" as an interval.
std::string one_sided(const Relation& r, const std::string& bound) {
  if (r.less) return interval("-\\infty", false, bound, !r.strict);
  return interval(bound, !r.strict, "\\infty", false);
}

}  // namespace

std::optional<std::string> inequality_as_interval(std::string_view answer) {
  const std::vector<Relation> rel = relations(answer);
  if (rel.empty() || rel.size() > 2) return std::nullopt;
  std::vector<std::string> parts;
  size_t from = 0;
  for (const auto& r : rel) {
    parts.push_back(text::trim(answer.substr(from, r.at - from)));
    from = r.at + r.length;
  }
  parts.push_back(text::trim(answer.substr(from)));
  for (const auto& p : parts)
    if (p.empty()) return std::nullopt;

  if (parts.size() == 2) {
    const bool left = text::has_variable_letter(parts[0]), right = text::has_variable_letter(parts[1]);
    if (left == right || !is_subject(parts[left ? 0 : 1])) return std::nullopt;
    if (left) return one_sided(rel[0], parts[1]);
    Relation flipped = rel[0];  // "5 \le x" is "x \ge 5"
    flipped.less = !flipped.less;
    return one_sided(flipped, parts[0]);
  }
  if (text::has_variable_letter(parts[0]) || !is_subject(parts[1]) || text::has_variable_letter(parts[2])) return std::nullopt;
  if (rel[0].less != rel[1].less) return std::nullopt;
  if (rel[0].less) return interval(parts[0], !rel[0].strict, parts[2], !rel[1].strict);
  return interval(parts[2], !rel[1].strict, parts[0], !rel[0].strict);  // "b > x > a"
}

}  // namespace rqat::eval
