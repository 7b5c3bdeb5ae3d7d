#include "eval/metrics.h"

#include <algorithm>
#include <cmath>

#include "io/error.h"

namespace rqat::eval {

double pass_at_k(int n, int c, int k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n)
    fail("pass@k needs 0 <= c <= n and 1 <= k <= n, got n={} c={} k={}", n, c, k);
  if (n - c < k) return 1.0;  // every k-subset contains a correct sample
  double all_wrong = 1.0;     // C(n-c, k) / C(n, k)
  for (int i = n - c + 1; i <= n; ++i) all_wrong *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - all_wrong;
}

MeanAndError mean_and_standard_error(const std::vector<double>& values) {
  MeanAndError result;
  if (values.empty()) return result;
  double sum = 0;
  for (double v : values) sum += v;
  const double n = static_cast<double>(values.size());
  result.mean = sum / n;
  if (values.size() < 2) return result;
  double squares = 0;
  for (double v : values) squares += (v - result.mean) * (v - result.mean);
  result.standard_error = std::sqrt(squares / (n - 1)) / std::sqrt(n);
  return result;
}

bool majority_correct(const std::vector<Sample>& samples, int k) {
  if (k < 1 || static_cast<std::size_t>(k) > samples.size())
    fail("maj@{} needs 1 <= k <= number of samples ({})", k, samples.size());
  // Answers in order of first occurrence, with their counts.
  std::vector<std::pair<const Sample*, int>> votes;
  for (int i = 0; i < k; ++i) {
    const Sample& sample = samples[static_cast<std::size_t>(i)];
    if (!sample.answer) continue;
    auto it = std::find_if(votes.begin(), votes.end(),
                           [&](const auto& vote) { return *vote.first->answer == *sample.answer; });
    if (it == votes.end()) {
      votes.emplace_back(&sample, 1);
    } else {
      ++it->second;
    }
  }
  const Sample* winner = nullptr;
  int best = 0;
  for (const auto& [first, count] : votes)
    if (count > best) {  // strict: an earlier answer keeps a tie
      best = count;
      winner = first;
    }
  return winner != nullptr && winner->correct;
}

Metrics compute_metrics(const std::vector<ProblemSamples>& problems, const std::vector<int>& ks) {
  Metrics metrics;
  metrics.problems = problems.size();
  if (problems.empty()) return metrics;
  std::size_t fewest = problems.front().samples.size();
  for (const auto& problem : problems) {
    if (problem.samples.empty()) fail("metrics: problem '{}' has no samples", problem.id);
    fewest = std::min(fewest, problem.samples.size());
  }
  for (int k : ks)
    if (k < 1 || static_cast<std::size_t>(k) > fewest)
      fail("metrics: k={} is outside 1..{} (the fewest samples of a problem)", k, fewest);

  std::vector<double> shares, rewards;
  bool every_sample_rewarded = true;
  double tokens = 0;
  std::size_t truncated = 0;
  for (const auto& problem : problems) {
    const int n = static_cast<int>(problem.samples.size());
    int c = 0;
    double reward = 0;
    for (const auto& sample : problem.samples) {
      c += sample.correct ? 1 : 0;
      tokens += static_cast<double>(sample.tokens);
      truncated += sample.truncated ? 1 : 0;
      every_sample_rewarded = every_sample_rewarded && sample.reward.has_value();
      reward += sample.reward.value_or(0.0);
    }
    metrics.samples += problem.samples.size();
    shares.push_back(static_cast<double>(c) / n);
    rewards.push_back(reward / n);
    for (int k : ks) {
      metrics.pass_at_k[k] += pass_at_k(n, c, k);
      metrics.maj_at_k[k] += majority_correct(problem.samples, k) ? 1.0 : 0.0;
    }
  }
  const double count = static_cast<double>(problems.size());
  for (auto& [k, value] : metrics.pass_at_k) value /= count;
  for (auto& [k, value] : metrics.maj_at_k) value /= count;
  const MeanAndError pass1 = mean_and_standard_error(shares);
  metrics.pass1 = pass1.mean;
  metrics.pass1_standard_error = pass1.standard_error;
  if (every_sample_rewarded) metrics.reward = mean_and_standard_error(rewards);
  metrics.mean_tokens = tokens / static_cast<double>(metrics.samples);
  metrics.truncated_share = static_cast<double>(truncated) / static_cast<double>(metrics.samples);
  return metrics;
}

std::map<std::string, Metrics> metrics_by(const std::vector<ProblemSamples>& problems,
                                          const std::string& key, const std::vector<int>& ks) {
  std::map<std::string, std::vector<ProblemSamples>> groups;
  for (const auto& problem : problems) {
    auto it = problem.tags.find(key);
    groups[it == problem.tags.end() ? std::string() : it->second].push_back(problem);
  }
  std::map<std::string, Metrics> result;
  for (const auto& [value, group] : groups) result[value] = compute_metrics(group, ks);
  return result;
}

}  // namespace rqat::eval
