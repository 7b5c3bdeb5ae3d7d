// Accuracy metrics of eval-math over n sampled completions per problem: pass@1 (mean over samples)
// with its standard error across problems, unbiased pass@k, maj@k (majority vote over normalized
// extracted answers), mean response length, share truncated, and a breakdown by subject / level.
// Definitions: docs/grading.md, "Metrics".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rqat::eval {

struct Sample {
  bool correct = false;
  std::optional<std::string> answer;  // normalized extracted answer; nullopt: none / unparseable
  std::int64_t tokens = 0;            // response length in tokens
  bool truncated = false;             // generation stopped at the length limit
  std::optional<double> reward;       // a configured reward's score (eval-math --reward)
};

struct ProblemSamples {
  std::string id;
  std::map<std::string, std::string> tags;  // e.g. {"subject", "Algebra"}, {"level", "3"}
  std::vector<Sample> samples;
};

struct MeanAndError {
  double mean = 0;
  double standard_error = 0;  // sample standard deviation (n-1) / sqrt(n); 0 when n < 2
};

struct Metrics {
  std::size_t problems = 0;
  std::size_t samples = 0;          // over all problems
  double pass1 = 0;                 // mean over problems of the per-problem share correct
  double pass1_standard_error = 0;  // sample standard deviation of those shares / sqrt(problems)
  std::map<int, double> pass_at_k;  // unbiased estimator, averaged over problems
  std::map<int, double> maj_at_k;   // share of problems whose majority answer is correct
  double mean_tokens = 0;           // over all samples
  double truncated_share = 0;       // over all samples
  // When every sample has a reward: the mean over problems of the per-problem mean reward (the
  // score study A reports), with its standard error across problems as pass@1's.
  std::optional<MeanAndError> reward;
};

// 1 - C(n-c, k) / C(n, k) as a product (no overflow): 1 - prod_{i=n-c+1}^{n} (1 - k/i).
// Requires 0 <= c <= n and 1 <= k <= n; throws rqat::Error otherwise.
double pass_at_k(int n, int c, int k);

MeanAndError mean_and_standard_error(const std::vector<double>& values);

// Majority vote over the first k samples' answers: the most frequent answer wins, ties go to the
// answer that occurred first; samples without an answer never win over a real answer. Returns
// whether the winning answer is correct (the correctness of its first sample); false when none of
// the first k samples has an answer. Requires 1 <= k <= samples.size().
bool majority_correct(const std::vector<Sample>& samples, int k);

// All metrics; every k in `ks` must be within 1..(fewest samples of a problem), else rqat::Error.
Metrics compute_metrics(const std::vector<ProblemSamples>& problems, const std::vector<int>& ks);

// compute_metrics per value of tags[key]; problems without that tag go under "".
std::map<std::string, Metrics> metrics_by(const std::vector<ProblemSamples>& problems,
                                          const std::string& key, const std::vector<int>& ks);

}  // namespace rqat::eval
