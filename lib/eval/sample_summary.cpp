#include "eval/sample_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "eval/normalize.h"
#include "io/error.h"

namespace rqat::eval {

std::vector<int> default_ks(int samples_per_problem) {
  std::vector<int> ks;
  for (int k = 1; k < samples_per_problem; k *= 2) ks.push_back(k);
  if (samples_per_problem >= 1) ks.push_back(samples_per_problem);
  return ks;
}

namespace {

std::vector<ProblemSamples> group_by_problem(const std::vector<GradedSample>& samples) {
  std::vector<ProblemSamples> problems;
  std::unordered_map<std::string, std::size_t> index;
  for (const auto& graded : samples) {
    auto [it, inserted] = index.try_emplace(graded.problem_id, problems.size());
    if (inserted) {
      problems.push_back({graded.problem_id, graded.tags, {}});
    }
    Sample sample;
    sample.correct = graded.kind == GradeKind::equal;
    // A vote needs an answer that could be read; unparseable ones never win maj@k.
    if (graded.kind != GradeKind::unparseable && !graded.extracted.empty())
      sample.answer = normalize_answer(graded.extracted);
    sample.tokens = graded.tokens;
    sample.truncated = graded.truncated;
    sample.reward = graded.reward;
    problems[it->second].samples.push_back(std::move(sample));
  }
  return problems;
}

}  // namespace

EvalSummary summarize_samples(const std::vector<GradedSample>& samples, std::vector<int> ks) {
  if (samples.empty()) fail("no samples to summarize");
  const auto problems = group_by_problem(samples);
  if (ks.empty()) {
    std::size_t fewest = problems.front().samples.size();
    for (const auto& p : problems) fewest = std::min(fewest, p.samples.size());
    ks = default_ks(static_cast<int>(fewest));
  }
  EvalSummary summary;
  summary.ks = ks;
  summary.overall = compute_metrics(problems, ks);
  for (const auto& graded : samples) {
    summary.unparseable += graded.kind == GradeKind::unparseable ? 1 : 0;
    summary.timeouts += graded.kind == GradeKind::timeout ? 1 : 0;
  }
  std::vector<std::string> tag_names;
  for (const auto& p : problems)
    for (const auto& [tag, value] : p.tags)
      if (std::find(tag_names.begin(), tag_names.end(), tag) == tag_names.end())
        tag_names.push_back(tag);
  for (const auto& tag : tag_names) summary.by_tag[tag] = metrics_by(problems, tag, ks);
  return summary;
}

nlohmann::ordered_json metrics_json(const Metrics& m) {
  nlohmann::ordered_json json;
  json["problems"] = m.problems;
  json["samples"] = m.samples;
  json["pass@1"] = m.pass1;
  json["pass@1_stderr"] = m.pass1_standard_error;
  auto& pass = json["pass@k"] = nlohmann::ordered_json::object();
  for (const auto& [k, value] : m.pass_at_k) pass[std::to_string(k)] = value;
  auto& maj = json["maj@k"] = nlohmann::ordered_json::object();
  for (const auto& [k, value] : m.maj_at_k) maj[std::to_string(k)] = value;
  json["mean_tokens"] = m.mean_tokens;
  json["truncated_share"] = m.truncated_share;
  if (m.reward) {
    json["mean_reward"] = m.reward->mean;
    json["mean_reward_stderr"] = m.reward->standard_error;
  }
  return json;
}

nlohmann::ordered_json summary_json(const EvalSummary& summary) {
  auto json = metrics_json(summary.overall);
  if (!summary.reward_spec.empty()) json["reward"] = summary.reward_spec;
  json["unparseable"] = summary.unparseable;
  json["timeouts"] = summary.timeouts;
  for (const auto& [tag, values] : summary.by_tag) {
    auto& by = json["by_" + tag] = nlohmann::ordered_json::object();
    for (const auto& [value, metrics] : values) by[value] = metrics_json(metrics);
  }
  return json;
}

namespace {

std::string percent(double share) { return fmt::format("{:.2f}", 100.0 * share); }

std::string header(const std::vector<int>& ks, const std::string& first) {
  std::string line =
      fmt::format("{:<24} {:>8} {:>8} {:>16}", first, "problems", "samples", "pass@1 (%)");
  for (int k : ks)
    if (k > 1) line += fmt::format(" {:>9}", fmt::format("pass@{}", k));
  for (int k : ks)
    if (k > 1) line += fmt::format(" {:>9}", fmt::format("maj@{}", k));
  line += fmt::format(" {:>11} {:>10}", "mean tokens", "truncated%");
  return line;
}

std::string row(const std::string& name, const Metrics& m, const std::vector<int>& ks) {
  std::string line =
      fmt::format("{:<24} {:>8} {:>8} {:>16}", name.substr(0, 24), m.problems, m.samples,
                  fmt::format("{} ± {}", percent(m.pass1), percent(m.pass1_standard_error)));
  for (int k : ks)
    if (k > 1) line += fmt::format(" {:>9}", percent(m.pass_at_k.at(k)));
  for (int k : ks)
    if (k > 1) line += fmt::format(" {:>9}", percent(m.maj_at_k.at(k)));
  line += fmt::format(" {:>11.1f} {:>10}", m.mean_tokens, percent(m.truncated_share));
  return line;
}

}  // namespace

std::string format_summary_table(const EvalSummary& summary, const std::string& title) {
  std::string text = header(summary.ks, "benchmark") + "\n";
  text += row(title, summary.overall, summary.ks) + "\n";
  if (const auto& reward = summary.overall.reward)
    text += fmt::format("mean reward ({}): {:.4f} ± {:.4f}\n", summary.reward_spec, reward->mean,
                        reward->standard_error);
  text += fmt::format("unparseable answers: {}   grading timeouts: {}\n", summary.unparseable,
                      summary.timeouts);
  for (const auto& [tag, values] : summary.by_tag) {
    text += fmt::format("\n{}\n", header(summary.ks, tag));
    for (const auto& [value, metrics] : values)
      text += row(value.empty() ? "(none)" : value, metrics, summary.ks) + "\n";
  }
  return text;
}

}  // namespace rqat::eval
