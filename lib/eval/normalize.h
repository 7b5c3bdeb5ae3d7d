// Normalization of a math answer string before comparison: removes LaTeX presentation (\text{},
// \left/\right, spacing, \dfrac), units, degrees, percent and dollar signs, thousands separators,
// trailing periods and an "x =" prefix, and braces LaTeX's one-token arguments (\frac12 ->
// \frac{1}{2}).
#pragma once

#include <string>
#include <string_view>

namespace rqat::eval {

// The normalized answer; every rule is listed in docs/grading.md.
std::string normalize_answer(std::string_view answer);

// normalize_answer without the steps that read the answer's form: the left side of "x = 5" and
// "x \in [1,2]" is kept, and "1,000" is not joined, so that the grader can tell assignments and
// equations apart before comparing (normalize_answer of this text is normalize_answer's result).
std::string normalize_presentation(std::string_view answer);

// Replaces `\name{content}` by `content` for each listed wrapper command (nested braces kept).
std::string unwrap_command(std::string_view text, std::string_view name);

// Index of the brace closing the one at `open`, or npos.
size_t matching_brace(std::string_view text, size_t open);

}  // namespace rqat::eval
