// Answers written with '=': an assignment ("x = 5", "(p,q) = (3,2)"), a chain that ends in its
// value ("x = 2+3 = 5", "26+1 = 27") or an equation ("y = 2x+1", "2x - y + 1 = 0"). The grader
// strips an assignment's left side when the other answer has none and compares equations by
// equivalence (docs/grading.md, rules "assignment" and "equation").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rqat::eval {

struct EquationForm {
  std::vector<std::string> parts;  // the text between top-level '=' signs, trimmed
  bool assignment = false;         // the first part is a variable or a tuple of variables
};

// Nullopt when the normalized answer has no top-level '=' (outside brackets and braces), or when
// it is a list of assignments ("x = 1, y = 2", compared item by item as a list).
std::optional<EquationForm> equation_form(std::string_view answer);

// The value the answer states: the last part of an assignment or chain ("x = 2+3 = 5" -> "5"), or
// of a chain of constants ("26+1 = 27" -> "27"); nullopt for an equation ("y = 2x+1" is a variable
// assignment and gives "2x+1"; "2x+1 = 5" gives nothing).
std::optional<std::string> equation_value(const EquationForm& form);

}  // namespace rqat::eval
