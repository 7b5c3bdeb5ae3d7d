// Finds the final answer in a model completion: the last \boxed{...} (or \boxed x, \fbox{...};
// adjacent boxes joined as a list), else "the final answer is X" / "the answer is X" / a "Final
// Answer" heading, else the last math span ($...$, $$...$$, \(...\), \[...\]) when no number
// follows it, else a short completion whole, else the last number; only the text after </think>
// counts when the model closed its thinking (priority order: docs/grading.md). Also reads GSM8K
// gold answers ("#### 42").
// Every function is linear in the text, however many markers it repeats; given a Budget it charges
// the characters it scans, so extraction counts against the comparison's deadline.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "eval/budget.h"

namespace rqat::eval {

// The text to grade: what follows the last </think> if the thinking was closed, else all of it
// (a model that never closed its thinking may still have boxed an answer in it; docs/grading.md).
std::string_view strip_thinking(std::string_view completion);

// Content of the last complete \boxed{...} / \boxed x / \fbox{...}; nested braces are matched.
std::optional<std::string> last_boxed(std::string_view text, Budget* budget = nullptr);

// The last box with the boxes right before it that belong to the same answer ("$\boxed{1}$ and
// $\boxed{2}$" -> "1, 2"); a box after other words ("then \boxed{2}") stands alone.
std::optional<std::string> final_boxes(std::string_view text, Budget* budget = nullptr);

// X of the last "final answer is X" / "answer is X" / "answer: X", up to the end of its line, or on the
// next line(s) after a bare phrase or a "Final Answer" heading (a \[...\] block may span lines); a
// leading $X$ followed by prose (Minerva's "The final answer is $X$. I hope it is correct.") is X.
std::optional<std::string> answer_phrase(std::string_view text, Budget* budget = nullptr);

// Content of the last math span ($...$, $$...$$, \(...\), \[...\]) when no digit follows it;
// "$5 and $6" style money is not a span.
std::optional<std::string> last_math_span(std::string_view text, Budget* budget = nullptr);

// A completion of at most 48 characters on one line, of math characters and without prose words,
// whole ("1/3", "(1, 2)"; not "#### 27").
std::optional<std::string> short_answer_text(std::string_view text);

// The last number in the text (thousands separators dropped), e.g. "-1,234.5" -> "-1234.5".
std::optional<std::string> last_number(std::string_view text, Budget* budget = nullptr);

// The gold of a GSM8K solution: what follows "####", commas dropped.
std::optional<std::string> gsm8k_gold(std::string_view solution);

// strip_thinking, then final_boxes, answer_phrase, last_math_span, short_answer_text, last_number.
std::optional<std::string> extract_answer(std::string_view completion, Budget* budget = nullptr);

}  // namespace rqat::eval
