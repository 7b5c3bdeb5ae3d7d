#include "experiment/findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "experiment/run_report.h"
#include "io/error.h"
#include "io/jsonl.h"

namespace rqat::experiment {

namespace fs = std::filesystem;

namespace {

// A difference this many standard errors from 0 decides a finding.
constexpr double kDecidingStandardErrors = 2.0;

// Instances of an arm's stage whose point has the arm's `where`.
std::vector<const StageInstance*> arm_instances(const ExperimentPlan& plan, const FindingArm& arm) {
  std::vector<const StageInstance*> found;
  for (const auto& s : plan.stages)
    if (s.stage == arm.stage && instance_matches(s, arm.where)) found.push_back(&s);
  return found;
}

bool fixed_by(const FindingArm& arm, const std::string& variable) {
  return std::any_of(arm.where.begin(), arm.where.end(),
                     [&](const auto& w) { return w.first == variable; });
}

// Two instances pair when they agree on every variable both depend on that no `where` fixes.
bool pair_up(const StageInstance& a, const StageInstance& b, const Finding& f) {
  for (const auto& [variable, value] : a.point) {
    if (fixed_by(f.higher, variable) || fixed_by(f.lower, variable)) continue;
    for (const auto& [other, other_value] : b.point)
      if (other == variable && other_value != value) return false;
  }
  return true;
}

std::string points(double share) { return fmt::format("{:+.1f}", 100 * share); }

}  // namespace

PairedDifference paired_difference(
    const std::vector<std::pair<ProblemScores, ProblemScores>>& pairs) {
  if (pairs.empty()) fail("findings: no pair of instances to compare");
  // Problems every pair has on both sides.
  std::vector<std::string> problems;
  for (const auto& entry : pairs.front().first) {
    const std::string& id = entry.first;  // a plain name: lambdas cannot capture bindings (clang)
    const bool everywhere = std::all_of(pairs.begin(), pairs.end(), [&](const auto& p) {
      return p.first.count(id) > 0 && p.second.count(id) > 0;
    });
    if (everywhere) problems.push_back(id);
  }
  if (problems.empty()) fail("findings: the compared evaluations share no problem");
  std::vector<double> d;
  d.reserve(problems.size());
  for (const auto& id : problems) {
    double sum = 0;
    for (const auto& [higher, lower] : pairs) sum += higher.at(id) - lower.at(id);
    d.push_back(sum / static_cast<double>(pairs.size()));
  }
  PairedDifference result;
  result.pairs = pairs.size();
  result.problems = d.size();
  double mean = 0;
  for (const double v : d) mean += v;
  mean /= static_cast<double>(d.size());
  result.difference = mean;
  if (d.size() > 1) {
    double squares = 0;
    for (const double v : d) squares += (v - mean) * (v - mean);
    result.standard_error =
        std::sqrt(squares / static_cast<double>(d.size() - 1)) / std::sqrt(d.size());
  }
  return result;
}

std::string finding_verdict(double difference, double standard_error) {
  if (standard_error <= 0) return difference > 0 ? "shown" : difference < 0 ? "refuted" : "undecided";
  const double z = difference / standard_error;
  if (z >= kDecidingStandardErrors) return "shown";
  if (z <= -kDecidingStandardErrors) return "refuted";
  return "undecided";
}

size_t problems_to_decide(const PairedDifference& d, double points) {
  const double half_width = points / 100 / kDecidingStandardErrors;  // the SE that decides
  const double ratio = d.standard_error / half_width;
  return static_cast<size_t>(std::ceil(static_cast<double>(d.problems) * ratio * ratio));
}

ProblemScores read_problem_scores(const fs::path& samples_jsonl, const std::string& metric) {
  std::map<std::string, std::pair<double, int>> sums;  // id -> (sum, samples)
  io::for_each_jsonl_object<nlohmann::json>(samples_jsonl, [&](const nlohmann::json& row,
                                                               size_t line) {
    const auto where = fmt::format("{}:{}", samples_jsonl.string(), line);
    if (!row.contains("id") || !row["id"].is_string()) fail("{}: needs a string 'id'", where);
    double score = 0;
    if (metric == "reward") {
      if (!row.contains("reward") || !row["reward"].is_number())
        fail("{}: no 'reward' (evaluate with eval-math --reward for a reward finding)", where);
      score = row["reward"].get<double>();
    } else {
      if (!row.contains("correct") || !row["correct"].is_boolean())
        fail("{}: needs a boolean 'correct'", where);
      score = row["correct"].get<bool>() ? 1.0 : 0.0;
    }
    auto& [sum, count] = sums[row["id"].get<std::string>()];
    sum += score;
    ++count;
  });
  ProblemScores scores;
  for (const auto& [id, sum_count] : sums) scores[id] = sum_count.first / sum_count.second;
  return scores;
}

std::vector<FindingResult> evaluate_findings(const ExperimentPlan& plan, const fs::path& run_dir) {
  std::vector<FindingResult> results;
  for (const auto& f : plan.findings) {
    FindingResult r;
    r.finding = f;
    std::vector<std::pair<ProblemScores, ProblemScores>> pairs;
    std::set<std::string> missing;
    std::map<std::string, ProblemScores> cache;
    const auto scores = [&](const StageInstance& s) -> const ProblemScores* {
      const fs::path file = instance_dir(run_dir, s) / "samples.jsonl";
      if (!fs::is_regular_file(file)) {
        missing.insert(s.id);
        return nullptr;
      }
      auto it = cache.find(s.id);
      if (it == cache.end()) it = cache.emplace(s.id, read_problem_scores(file, f.metric)).first;
      return &it->second;
    };
    for (const StageInstance* high : arm_instances(plan, f.higher))
      for (const StageInstance* low : arm_instances(plan, f.lower)) {
        if (high == low || !pair_up(*high, *low, f)) continue;
        const ProblemScores* a = scores(*high);
        const ProblemScores* b = scores(*low);
        if (a && b) pairs.emplace_back(*a, *b);
      }
    if (!missing.empty() || pairs.empty()) {
      r.verdict = "not run";
      r.note = !missing.empty()
                   ? fmt::format("no samples.jsonl yet: {}", fmt::join(missing, ", "))
                   : "no pair of instances (the sweep leaves an arm without instances)";
    } else {
      r.difference = paired_difference(pairs);
      r.verdict = finding_verdict(r.difference->difference, r.difference->standard_error);
    }
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<std::vector<std::string>> findings_table_cells(
    const std::vector<FindingResult>& results) {
  std::vector<std::vector<std::string>> cells = {{"finding", "claim", "metric", "pairs", "problems",
                                                  "difference", "paired SE", "z", "verdict",
                                                  "problems for 3 pts", "problems to decide"}};
  for (const auto& r : results) {
    if (!r.difference) {
      cells.push_back({r.finding.name, r.finding.claim, r.finding.metric, "", "", "", "", "",
                       r.verdict, "", r.note});
      continue;
    }
    const auto& d = *r.difference;
    const double z = d.standard_error > 0 ? d.difference / d.standard_error : 0.0;
    cells.push_back({r.finding.name, r.finding.claim, r.finding.metric, std::to_string(d.pairs),
                     std::to_string(d.problems), points(d.difference),
                     fmt::format("{:.1f}", 100 * d.standard_error),
                     d.standard_error > 0 ? fmt::format("{:+.1f}", z) : "",
                     r.verdict, std::to_string(problems_to_decide(d, 3.0)),
                     // What would decide the difference this run saw (none when it is 0).
                     r.verdict == "undecided" && d.difference != 0
                         ? std::to_string(problems_to_decide(d, 100 * std::abs(d.difference)))
                         : ""});
  }
  return cells;
}

}  // namespace rqat::experiment
