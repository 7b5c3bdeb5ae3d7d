// The math-answer grader of eval-math: extracts the prediction's final answer, normalizes both
// answers, and decides equal / not_equal / unparseable / timeout (exactly for rationals,
// numerically for constants and functions, at seeded random points for variables). Rules:
// docs/grading.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eval/budget.h"

namespace rqat::eval {

enum class GradeKind {
  equal,
  not_equal,
  unparseable,  // no answer found in the prediction, or the prediction's answer is not math we read
  timeout,      // the comparison ran out of its budget
};

const char* to_string(GradeKind kind);

struct GradeOptions {
  std::chrono::milliseconds timeout{2000};  // per comparison, checked inside parser and evaluator
  bool extract_prediction = true;           // run extract_answer on the prediction
  bool extract_gold = true;                 // gold with \boxed{} or "####": take that part
  double relative_tolerance = 1e-9;         // numeric comparisons of irrational values
  int random_points = 6;                    // evaluation points when variables remain
  std::uint64_t seed = 0x5eed'2024'0401ULL;
};

struct GradeResult {
  GradeKind kind = GradeKind::unparseable;
  std::string prediction_answer;  // what was extracted from the prediction
  std::string gold_answer;        // the gold answer compared against
  std::string detail;             // why, when not equal
};

GradeResult grade(std::string_view prediction, std::string_view gold,
                  const GradeOptions& options = {});

// Compares two extracted answers (no extraction) within `budget`; throws Timeout.
GradeKind compare_answers(std::string_view prediction, std::string_view gold, Budget& budget,
                          const GradeOptions& options = {});

// Grades every (prediction, gold) pair with `threads` std::threads (0: hardware concurrency).
std::vector<GradeResult> grade_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                     unsigned threads, const GradeOptions& options = {});

}  // namespace rqat::eval
