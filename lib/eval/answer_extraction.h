// Finds the final answer in a model completion: the last \boxed{...} (or \boxed x, \fbox{...}),
// else "the final answer is X" / "the answer is X", else the last number; only the text after
// </think> counts when the model closed its thinking. Also reads GSM8K gold answers ("#### 42").
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

// X of the last "final answer is X" / "answer is X" / "answer: X", up to the end of its line; a
// leading $X$ followed by prose (Minerva's "The final answer is $X$. I hope it is correct.") is X.
std::optional<std::string> answer_phrase(std::string_view text, Budget* budget = nullptr);

// The last number in the text (thousands separators dropped), e.g. "-1,234.5" -> "-1234.5".
std::optional<std::string> last_number(std::string_view text, Budget* budget = nullptr);

// The gold of a GSM8K solution: what follows "####", commas dropped.
std::optional<std::string> gsm8k_gold(std::string_view solution);

// strip_thinking, then last_boxed, answer_phrase, last_number in that order.
std::optional<std::string> extract_answer(std::string_view completion, Budget* budget = nullptr);

}  // namespace rqat::eval
