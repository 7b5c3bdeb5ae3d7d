// From graded samples to the numbers an evaluation reports: the metrics of metrics.h overall and
// per subject / level, plus the counts of unparseable answers and grading timeouts. Shared by the
// evaluation run and `eval-math grade`, so re-grading a saved run reproduces its summary exactly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/grader.h"
#include "eval/metrics.h"

namespace rqat::eval {

struct GradedSample {
  std::string problem_id;                   // samples of one problem share it
  std::map<std::string, std::string> tags;  // "subject", "level" when the benchmark has them
  GradeKind kind = GradeKind::unparseable;
  std::string extracted;  // the prediction's extracted answer ("" when none)
  int64_t tokens = 0;
  bool truncated = false;        // stopped at the length limit
  std::optional<double> reward;  // the configured reward's score (eval-math --reward)
};

struct EvalSummary {
  Metrics overall;
  std::map<std::string, std::map<std::string, Metrics>> by_tag;  // tag -> value -> metrics
  std::size_t unparseable = 0;
  std::size_t timeouts = 0;
  std::vector<int> ks;
  std::string reward_spec;  // the reward the samples were scored with ("" = none)
  // eval-math stopped by this signal before its end (its finished samples are kept on disk, no
  // metrics were computed); 0 when it ran to the end.
  int stopped_by_signal = 0;
};

// The ks reported for n samples per problem: 1, 2, 4, ... below n, and n.
std::vector<int> default_ks(int samples_per_problem);

// Groups samples by problem_id (problems in order of first appearance), computes metrics with
// `ks` (empty: default_ks of the fewest samples of a problem) and breaks them down by every tag.
EvalSummary summarize_samples(const std::vector<GradedSample>& samples, std::vector<int> ks = {});

// {"problems", "samples", "pass@1", "pass@1_stderr", "pass@k": {...}, "maj@k": {...},
//  "mean_tokens", "truncated_share"} for one Metrics, and "mean_reward", "mean_reward_stderr"
// when the samples were scored with a reward.
nlohmann::ordered_json metrics_json(const Metrics& metrics);
// metrics_json(overall) plus "reward" (the spec, when scored), "unparseable", "timeouts" and
// "by_<tag>": {value: metrics_json}.
nlohmann::ordered_json summary_json(const EvalSummary& summary);

// Console tables: the overall row (title, problems, samples, pass@1 ± stderr in percent, pass@k,
// maj@k, mean tokens, truncated %, unparseable, timeouts) and one table per tag.
std::string format_summary_table(const EvalSummary& summary, const std::string& title);

}  // namespace rqat::eval
