// The verdict of a run on each finding its experiment declares (`findings:`, docs/experiments.md).
//
// A finding compares two arms of eval-math instances. Instances pair up when they agree on every
// sweep variable both depend on, except those the arms' `where` fix (eval_qat with objective kd
// pairs with eval_qat with objective sft of the same bits and init; every eval_ptq pairs with the
// one eval_teacher). For each pair and each problem both evaluated, d = score(higher) -
// score(lower), a problem's score being the share of its samples that are correct (or their mean
// reward); a problem's d is averaged over the pairs, and the finding's difference is the mean over
// problems with the paired standard error sd(d) / sqrt(problems). Pairing removes the spread of
// problem difficulty that two independent means carry (their SE, sqrt(SE_a^2 + SE_b^2), is larger
// whenever the arms agree on which problems are hard).
//
// Verdict: "shown" when the difference is at least 2 SE in the paper's direction, "refuted" at
// least 2 SE against it, "undecided" otherwise ("not run" while an instance has no samples).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

// Per-problem scores of one instance: problem id -> score.
using ProblemScores = std::map<std::string, double>;

struct PairedDifference {
  size_t pairs = 0;
  size_t problems = 0;          // problems in every pair
  double difference = 0;        // mean over problems of d (score units: a share, or reward)
  double standard_error = 0;    // sample standard deviation of d / sqrt(problems)
};

// The paired difference over `pairs` of (higher, lower) scores; problems missing from any score
// map are left out. Fails when no problem is in all of them.
PairedDifference paired_difference(const std::vector<std::pair<ProblemScores, ProblemScores>>& pairs);

// "shown", "refuted" or "undecided" (see the top of this file); with no spread at all (SE 0) any
// nonzero difference decides.
std::string finding_verdict(double difference, double standard_error);

// Problems at which a difference of `points` (in score units x 100) would be 2 paired SE, given
// the spread per problem this run measured: problems x (SE / (points / 200))^2, rounded up.
size_t problems_to_decide(const PairedDifference& d, double points);

// The mean score of each problem in an eval-math output directory's samples.jsonl: the share of
// `correct` samples, or the mean `reward` (which the evaluation must have scored: --reward).
ProblemScores read_problem_scores(const std::filesystem::path& samples_jsonl,
                                  const std::string& metric);

struct FindingResult {
  Finding finding;
  std::optional<PairedDifference> difference;  // none when not run
  std::string verdict;                         // shown, refuted, undecided, not run
  std::string note;                            // why it is not run, or ""
};

// Every finding of the plan on the run directory's outputs.
std::vector<FindingResult> evaluate_findings(const ExperimentPlan& plan,
                                             const std::filesystem::path& run_dir);

// Table: finding, claim, metric, pairs, problems, difference (points: x 100), paired SE, difference
// / SE, verdict, problems at which 3 points would be 2 SE and, for an undecided finding, problems at
// which the difference this run measured would be (the note of a finding not run there).
std::vector<std::vector<std::string>> findings_table_cells(const std::vector<FindingResult>& results);

}  // namespace rqat::experiment
