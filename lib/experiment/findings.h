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
// Training seeds (`seeds:`, the plan's seed_variable): pairs are grouped by their training seed,
// d(s, p) being problem p's difference averaged over the pairs of seed s. The difference is the
// mean over seeds and problems, and its SE treats seeds and problems as two crossed random samples
// (two-way random-effects ANOVA without replication): Var = MS_seed/(S P) + max(0, MS_problem -
// MS_residual)/(S P), i.e. the between-seed variance of the seeds' differences over S plus the
// problem variance (its residual part removed) over P; with d = a_s + b_p exactly it is var(a)/S +
// var(b)/P. A difference that one seed drives has a large between-seed term and is not decided.
// One seed (or arms that no seed reaches, e.g. PTQ against the teacher): the problem-only SE above.
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

// One pair of instances (higher, lower) and the training seed it belongs to ("" when neither
// instance depends on a seed).
struct SeededPair {
  std::string seed;
  ProblemScores higher, lower;
};

struct SeedDifference {
  std::string seed;
  double difference = 0;  // mean over problems of d(seed, p)
};

struct PairedDifference {
  size_t pairs = 0;
  size_t problems = 0;          // problems in every pair
  size_t seeds = 1;             // seed groups the pairs fall in
  double difference = 0;        // mean over seeds and problems of d (a share, or reward)
  double standard_error = 0;    // over seeds and problems (the top of this file)
  double seed_standard_error = 0;     // its between-seed part: sd(seed differences) / sqrt(seeds)
  double problem_standard_error = 0;  // its problem part (all of it with one seed)
  std::vector<SeedDifference> per_seed;  // in seed order; one entry with one seed
};

// The paired difference over `pairs` of (higher, lower) scores, grouped by seed (all of one seed:
// the problem-only paired SE); problems missing from any score map are left out. Fails when no
// problem is in all of them.
PairedDifference paired_difference(const std::vector<SeededPair>& pairs);

// "shown", "refuted" or "undecided" (see the top of this file); with no spread at all (SE 0) any
// nonzero difference decides.
std::string finding_verdict(double difference, double standard_error);

// Problems at which a difference of `points` (in score units x 100) would be 2 SE, given the
// spread this run measured: problems x SE_problem^2 / ((points / 200)^2 - SE_seed^2), rounded up
// (problems x (SE / (points / 200))^2 with one seed). None when the between-seed part alone is
// above points / 200: more problems cannot decide it, more seeds can.
std::optional<size_t> problems_to_decide(const PairedDifference& d, double points);

// The mean score of each problem in an eval-math output directory's samples.jsonl: the share of
// `correct` samples, or the mean `reward` (which the evaluation must have scored: --reward).
ProblemScores read_problem_scores(const std::filesystem::path& samples_jsonl,
                                  const std::string& metric);

struct FindingResult {
  Finding finding;
  std::optional<PairedDifference> difference;  // none when not run
  std::string verdict;                         // shown, refuted, undecided, not run
  std::string note;                            // why it is not run, or ""
  // What the SE covers: "seeds+problems"; "problems, 1 seed" when the arms train with one seed (or
  // one training run each: no `seeds:`); "problems" when no arm depends on a training seed.
  std::string standard_error_over;
};

// Every finding of the plan on the run directory's outputs.
std::vector<FindingResult> evaluate_findings(const ExperimentPlan& plan,
                                             const std::filesystem::path& run_dir);

// Table: finding, claim, metric, pairs, problems, seeds, difference (points: x 100), the
// difference of each seed, SE, what the SE covers, difference / SE, verdict, problems at which 3
// points would be 2 SE and, for an undecided finding, problems at which the difference this run
// measured would be ("more seeds" where problems cannot; the note of a finding not run there).
std::vector<std::vector<std::string>> findings_table_cells(const std::vector<FindingResult>& results);

}  // namespace rqat::experiment
