// Parses one normalized LaTeX or plain-text math answer (see eval/normalize.h) into an expression
// tree (eval/expression.h): numbers, \frac, a/b, \sqrt[n]{x}, powers, \pi, e, functions, n!,
// \binom, implicit products, |x|, and a single equation a = b. Structured answers are split before
// this.
#pragma once

#include <stdexcept>
#include <string_view>

#include "eval/budget.h"
#include "eval/expression.h"

namespace rqat::eval {

class ParseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ParseError for text that is not one expression (or one equation), Timeout when the budget
// runs out. Nesting deeper than kMaxNesting levels (recursion or tree height) and text longer than
// kMaxAnswerChars are ParseErrors.
ExprPtr parse_latex(std::string_view text, Budget& budget);

}  // namespace rqat::eval
