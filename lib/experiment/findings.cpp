#include "experiment/findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "experiment/run_report.h"
#include "experiment/sample_statistics.h"
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

// The training seed of a pair: the seed value of either instance ("" when neither has one; both,
// joined, when an arm's `where` fixes the seed and the two differ).
std::string pair_seed(const StageInstance& high, const StageInstance& low,
                      const std::string& seed_variable) {
  if (seed_variable.empty()) return "";
  const std::string a = point_value(high, seed_variable), b = point_value(low, seed_variable);
  if (a.empty() || b.empty() || a == b) return a.empty() ? b : a;
  return a + "/" + b;
}

}  // namespace

PairedDifference paired_difference(const std::vector<SeededPair>& pairs) {
  if (pairs.empty()) fail("findings: no pair of instances to compare");
  // Problems every pair has on both sides.
  std::vector<std::string> problems;
  for (const auto& entry : pairs.front().higher) {
    const std::string& id = entry.first;  // a plain name: lambdas cannot capture bindings (clang)
    const bool everywhere = std::all_of(pairs.begin(), pairs.end(), [&](const SeededPair& p) {
      return p.higher.count(id) > 0 && p.lower.count(id) > 0;
    });
    if (everywhere) problems.push_back(id);
  }
  if (problems.empty()) fail("findings: the compared evaluations share no problem");
  // d(s, p): problem p's difference averaged over the pairs of seed s.
  // Seeds in numeric order (shorter first: "2" before "10"), as the sweep lists them.
  const auto numeric_order = [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  };
  std::map<std::string, std::vector<const SeededPair*>, decltype(numeric_order)> by_seed(
      numeric_order);
  for (const auto& pair : pairs) by_seed[pair.seed].push_back(&pair);
  const size_t n_problems = problems.size();
  std::vector<std::vector<double>> d;  // [seed][problem]
  PairedDifference result;
  for (const auto& [seed, members] : by_seed) {
    std::vector<double> row(n_problems, 0.0);
    for (size_t p = 0; p < n_problems; ++p) {
      for (const SeededPair* pair : members)
        row[p] += pair->higher.at(problems[p]) - pair->lower.at(problems[p]);
      row[p] /= static_cast<double>(members.size());
    }
    result.per_seed.push_back({seed, mean_of(row)});
    d.push_back(std::move(row));
  }
  const size_t n_seeds = d.size();
  result.pairs = pairs.size();
  result.problems = n_problems;
  result.seeds = n_seeds;
  std::vector<double> seed_means;
  for (const auto& s : result.per_seed) seed_means.push_back(s.difference);
  const double grand = mean_of(seed_means);
  result.difference = grand;
  const double P = static_cast<double>(n_problems), S = static_cast<double>(n_seeds);
  if (n_seeds == 1) {
    if (n_problems > 1)
      result.problem_standard_error = std::sqrt(sample_variance(d[0]) / P);
    result.standard_error = result.problem_standard_error;
    return result;
  }
  // Two-way ANOVA of d(s, p) without replication: seeds and problems crossed.
  const double between_seeds = sample_variance(seed_means);  // = MS_seed / P
  double problem_part = 0;
  if (n_problems > 1) {
    std::vector<double> problem_means(n_problems, 0.0);
    for (size_t p = 0; p < n_problems; ++p) {
      for (size_t s = 0; s < n_seeds; ++s) problem_means[p] += d[s][p];
      problem_means[p] /= S;
    }
    const double ms_problem = S * sample_variance(problem_means);
    double residual = 0;
    for (size_t s = 0; s < n_seeds; ++s)
      for (size_t p = 0; p < n_problems; ++p) {
        const double r = d[s][p] - seed_means[s] - problem_means[p] + grand;
        residual += r * r;
      }
    const double ms_residual = residual / ((S - 1) * (P - 1));
    // Negative when the problems vary less than the interaction would make them: no problem
    // component then (the usual truncation of a variance component at 0).
    problem_part = std::max(0.0, ms_problem - ms_residual) / (S * P);
  }
  result.seed_standard_error = std::sqrt(between_seeds / S);
  result.problem_standard_error = std::sqrt(problem_part);
  result.standard_error = std::sqrt(between_seeds / S + problem_part);
  return result;
}

std::string finding_verdict(double difference, double standard_error) {
  if (standard_error <= 0) return difference > 0 ? "shown" : difference < 0 ? "refuted" : "undecided";
  const double z = difference / standard_error;
  if (z >= kDecidingStandardErrors) return "shown";
  if (z <= -kDecidingStandardErrors) return "refuted";
  return "undecided";
}

std::optional<size_t> problems_to_decide(const PairedDifference& d, double points) {
  const double half_width = points / 100 / kDecidingStandardErrors;  // the SE that decides
  const double room = half_width * half_width - d.seed_standard_error * d.seed_standard_error;
  if (room <= 0) return std::nullopt;
  const double problem_variance = d.problem_standard_error * d.problem_standard_error;
  return static_cast<size_t>(std::ceil(static_cast<double>(d.problems) * problem_variance / room));
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
    std::vector<SeededPair> pairs;
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
        if (a && b) pairs.push_back({pair_seed(*high, *low, plan.seed_variable), *a, *b});
      }
    if (!missing.empty() || pairs.empty()) {
      r.verdict = "not run";
      r.note = !missing.empty()
                   ? fmt::format("no samples.jsonl yet: {}", fmt::join(missing, ", "))
                   : "no pair of instances (the sweep leaves an arm without instances)";
    } else {
      r.difference = paired_difference(pairs);
      r.verdict = finding_verdict(r.difference->difference, r.difference->standard_error);
      const bool seeded = std::any_of(pairs.begin(), pairs.end(),
                                      [](const SeededPair& p) { return !p.seed.empty(); });
      r.standard_error_over = r.difference->seeds > 1 ? "seeds+problems"
                              : seeded || plan.seed_variable.empty() ? "problems, 1 seed"
                                                                     : "problems";
    }
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<std::vector<std::string>> findings_table_cells(
    const std::vector<FindingResult>& results) {
  std::vector<std::vector<std::string>> cells = {
      {"finding", "claim", "metric", "pairs", "problems", "seeds", "difference", "per seed", "SE",
       "SE over", "z", "verdict", "problems for 3 pts", "problems to decide"}};
  // 0 problems: the problems' variance component is 0 (truncated), so any number would do.
  const auto count = [](const std::optional<size_t>& n) {
    return !n ? std::string("more seeds") : *n == 0 ? std::string("any") : std::to_string(*n);
  };
  for (const auto& r : results) {
    if (!r.difference) {
      cells.push_back({r.finding.name, r.finding.claim, r.finding.metric, "", "", "", "", "", "",
                       "", "", r.verdict, "", r.note});
      continue;
    }
    const auto& d = *r.difference;
    const double z = d.standard_error > 0 ? d.difference / d.standard_error : 0.0;
    std::vector<std::string> per_seed;
    for (const auto& s : d.per_seed) per_seed.push_back(points(s.difference));
    cells.push_back({r.finding.name, r.finding.claim, r.finding.metric, std::to_string(d.pairs),
                     std::to_string(d.problems), std::to_string(d.seeds), points(d.difference),
                     d.seeds > 1 ? fmt::format("{}", fmt::join(per_seed, " ")) : "",
                     fmt::format("{:.1f}", 100 * d.standard_error), r.standard_error_over,
                     d.standard_error > 0 ? fmt::format("{:+.1f}", z) : "",
                     r.verdict, count(problems_to_decide(d, 3.0)),
                     // What would decide the difference this run saw (none when it is 0).
                     r.verdict == "undecided" && d.difference != 0
                         ? count(problems_to_decide(d, 100 * std::abs(d.difference)))
                         : ""});
  }
  return cells;
}

}  // namespace rqat::experiment
