// Splitting answers at '=' outside brackets and braces (split_top_level), so that a tuple's commas
// and a set's braces never split an answer in the wrong place.
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
  form.parts = split_top_level(answer, "=");
  if (form.parts.size() < 2) return std::nullopt;
  for (auto& part : form.parts) {
    // "<=", ">=", "!=" are not the '=' of an equation.
    if (part.ends_with('<') || part.ends_with('>') || part.ends_with('!')) return std::nullopt;
    part = text::trim(part);
    if (part.empty()) return std::nullopt;
  }
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
