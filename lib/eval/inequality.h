// Inequalities as intervals: "x \geq 5", "5 \le x", "x >= 5" all become "[5,\infty)", and a chain
// "a < x < b" becomes "(a,b)", so the grader compares them with each other and with intervals as
// one kind of answer (docs/grading.md, rule "inequality-interval").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rqat::eval {

// The interval written by a normalized inequality over one subject (a variable or an expression
// such as f(x)) with constant bounds: one relation (either side) or a chain of two in the same
// direction. Nullopt for anything else (no relation, two subjects, "a < x > b").
std::optional<std::string> inequality_as_interval(std::string_view answer);

}  // namespace rqat::eval
