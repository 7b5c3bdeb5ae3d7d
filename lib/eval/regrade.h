// `eval-math grade FILE [--out OUT]`: re-grades a JSONL of completions (each line with `completion`
// and `gold`, other fields kept) and writes each line back with `extracted` and `correct` added.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "eval/grader.h"
#include "eval/sample_summary.h"

namespace rqat::eval {

struct RegradeSummary {
  std::size_t count = 0;        // graded lines
  std::size_t correct = 0;      // graded equal
  std::size_t unparseable = 0;  // no answer / answer not readable as math
  std::size_t timeouts = 0;     // comparison ran out of its budget (counted as wrong)
  double accuracy = 0;          // correct / count; 0 when count is 0
  // The evaluation metrics, as an eval-math run computes them: lines are grouped into problems by
  // `id` (each line is its own problem when `id` is absent), with `tokens`, `finish_reason`
  // ("length" = truncated), `subject` and `level` read when present.
  EvalSummary metrics;
};

// Reads `input` (blank lines skipped), grades every line's `completion` against its `gold` with
// grade_batch (`threads` 0: hardware concurrency) and writes `output` atomically: each input line's
// object with `extracted` (the extracted answer, or null) and `correct` (bool) set. `gold` may be
// a string, a number or a list of strings (json_answer_text). Errors name the file and line.
// `output` may equal `input`.
// `ks`: pass@k / maj@k to report (empty: 1, 2, 4, ..., n).
RegradeSummary regrade_file(const std::filesystem::path& input, const std::filesystem::path& output,
                            const GradeOptions& options = {}, unsigned threads = 0,
                            const std::vector<int>& ks = {});

// The default OUT for FILE: `x.jsonl` -> `x.graded.jsonl` next to it.
std::filesystem::path default_regrade_output(const std::filesystem::path& input);

// A small text table: count, correct, unparseable, timeouts, accuracy (percent, 2 decimals),
// then the metrics table of format_summary_table.
std::string format_regrade_summary(const RegradeSummary& summary);

}  // namespace rqat::eval
