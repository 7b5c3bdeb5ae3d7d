// Splitting answers at '=' with plain scans: brackets and braces are tracked so that a tuple's
// commas and a set's braces never split an answer in the wrong place.
#include "eval/equation_form.h"

#include "eval/answer_structure.h"
#include "eval/text_util.h"

namespace rqat::eval {

namespace {

bool is_variable(std::string_view s) {
  const size_t length = text::variable_length(s);
  return length > 0 && length == s.size();
}

// "(p,q)" or "(a, b, c)": a tuple of variables.
bool is_variable_tuple(std::string_view s) {
  if (s.size() < 3 || s.front() != '(' || s.back() != ')') return false;
  const auto items = split_top_level(s.substr(1, s.size() - 2), ",");
  if (items.size() < 2) return false;
  for (const auto& item : items)
    if (!is_variable(text::trim(item))) return false;
  return true;
}

}  // namespace

std::optional<EquationForm> equation_form(std::string_view answer) {
  EquationForm form;
  int depth = 0;
  size_t from = 0;
  for (size_t i = 0; i < answer.size(); ++i) {
    const char c = answer[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    if (c != '=' || depth != 0) continue;
    // "<=", ">=", "!=", ":=" are not the '=' of an equation.
    if (i > 0 && (answer[i - 1] == '<' || answer[i - 1] == '>' || answer[i - 1] == '!')) return std::nullopt;
    form.parts.push_back(text::trim(answer.substr(from, i - from)));
    from = i + 1;
  }
  if (form.parts.empty()) return std::nullopt;
  form.parts.push_back(text::trim(answer.substr(from)));
  for (const auto& part : form.parts)
    if (part.empty()) return std::nullopt;
  // "x = 1, y = 2": each item has its own '='.
  int items_with_equals = 0;
  for (const auto& item : split_top_level(answer, ","))
    if (item.find('=') != std::string::npos) ++items_with_equals;
  if (items_with_equals > 1) return std::nullopt;
  form.assignment = is_variable(form.parts[0]) || is_variable_tuple(form.parts[0]);
  return form;
}

std::optional<std::string> equation_value(const EquationForm& form) {
  if (form.assignment) return form.parts.back();
  for (const auto& part : form.parts)
    if (text::has_variable_letter(part)) return std::nullopt;
  return form.parts.back();
}

}  // namespace rqat::eval
