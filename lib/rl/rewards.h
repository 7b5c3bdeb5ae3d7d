// Rewards of GRPO training: scalar scores of one completion against the gold answer, a weighted sum
// of named parts (each part reported for metrics), a registry so a reward is chosen by a spec
// string and users can add their own, and batch scoring on threads (grading math is CPU-heavy).
//
// Built-in rewards (registry name: default weight, what the part scores):
//   math:       1.0, 1 when eval::grade says the completion's answer equals the gold (the eval-math
//               grader and its answer extraction: last \boxed, else an answer phrase, else the last
//               number, after </think>), else 0. A grading timeout or an unparseable answer is 0.
//               An answer part with more than 64 \boxed / \fbox is graded from its 64th-last box
//               on, which bounds the extraction's cost on degenerate repetitive rollouts.
//   math_boxed: 1.0, the same, but only a \boxed{...} answer counts (no phrase / last-number
//               fallback): the study of arXiv 2511.15694 rewards "a correct boxed answer".
//   format:     0.1, 1 when the answer part holds exactly one well-formed \boxed{...} (see
//               has_single_boxed_answer), else 0; with the default weight a bonus of 0.1, so
//               "math+format" scores {0, 0.1, 1.1} like that study's reward.
//   format_last_box:
//               0.1, that study's own format rule (its code's boxed_reward_fn): 1 when the last
//               \boxed opens a brace group that closes (see last_box_parses), whatever came
//               before it and whether or not the completion was truncated. Study A's reward is
//               "math_boxed+format_last_box".
// A truncated completion (generation hit the length limit) is graded on its text like any other by
// math / math_boxed; the caller decides whether to mask it out of the loss. It never gets the
// `format` bonus: a finished answer is part of that format, and otherwise boxing drafts and
// running out of tokens would pay. (format_last_box, the study's rule, does pay it.)
//
// Spec strings (make_reward): parts joined by '+', each "name" or "name:weight", e.g. "math",
// "math+format", "math_boxed+format:0.2", "math+format:0" (logs the format rate, adds nothing).
// Weights are finite reals (negative allowed, for penalties); a name appears at most once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "eval/grader.h"

namespace rqat::rl {

struct RewardInput {
  std::string completion;  // the generated text after the prompt (thinking included)
  std::string gold;        // the reference: a bare answer, or a solution with \boxed{} / "####"
  std::string prompt;      // the problem as posed, for rewards that need it
  bool truncated = false;  // generation stopped at the length limit, not at end of sequence
};

// One named part of a reward: it adds weight * value to the total.
struct RewardPart {
  std::string name;
  double weight = 1;
  double value = 0;
};

struct RewardBreakdown {
  double total = 0;
  std::vector<RewardPart> parts;
};

// A reward. score() is called concurrently from several threads by score_batch: implementations
// must be safe for concurrent const calls.
class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  virtual std::string name() const = 0;
  virtual double score(const RewardInput& in) const = 0;
  // The parts behind score(in); by default one part {name(), 1, score(in)}.
  virtual RewardBreakdown breakdown(const RewardInput& in) const;
};

struct MathRewardOptions {
  // The grader's options (per-comparison timeout 2 s by default, bounded work on any input).
  eval::GradeOptions grade;
  bool boxed_only = false;  // only a \boxed{...} answer counts (registry name math_boxed)
};

// 1 when the completion's answer equals the gold, else 0 (see the file comment).
class MathCorrectnessReward : public RewardFunction {
 public:
  explicit MathCorrectnessReward(MathRewardOptions options = {});
  std::string name() const override;
  double score(const RewardInput& in) const override;
  // The grader's full verdict (equal / not_equal / unparseable / timeout), for metrics.
  eval::GradeResult grade(const RewardInput& in) const;

 private:
  MathRewardOptions options_;
};

// True when the answer part of the completion (after </think> if the thinking was closed, as the
// grader reads it) contains the control word \boxed exactly once, followed (after optional spaces)
// by a brace group that closes, with non-blank content. Braces are matched as the grader matches
// them (\{ and \} are literal braces). \boxed 5 (no braces), \boxed{} or an unclosed \boxed{ are
// malformed; two boxes, even both well-formed, are not "exactly one". Linear in the text length.
bool has_single_boxed_answer(std::string_view completion);

// Study A's format rule, after the MATH repository's last_boxed_only_string + remove_boxed that
// its reward calls: in the answer part (after </think>, as above), the last occurrence of
// "\boxed" is immediately followed by '{', and counting every '{' and '}' from there (no escapes,
// as that code counts) the group closes. Empty content, earlier boxes (closed or not) and text
// after the box are all fine; an unclosed last box fails even when an earlier one closed;
// "\boxed 5", "\boxed {5}" and \fbox{...} fail. Linear in the text length.
bool last_box_parses(std::string_view completion);

enum class FormatRule {
  kSingleBox,  // registry "format": has_single_boxed_answer, and the completion was not truncated
  kLastBox,    // registry "format_last_box" (study A): last_box_parses, truncated or not
};

// `bonus` when the completion satisfies `rule`, else 0.
class BoxedFormatReward : public RewardFunction {
 public:
  explicit BoxedFormatReward(double bonus = 0.1, FormatRule rule = FormatRule::kSingleBox);
  std::string name() const override;
  double score(const RewardInput& in) const override;
  double bonus() const { return bonus_; }

 private:
  double bonus_;
  FormatRule rule_;
};

struct WeightedReward {
  std::shared_ptr<const RewardFunction> reward;
  double weight = 1;
  std::string name;  // the part's name in metrics and in name(); empty: reward->name()
};

// sum_k weight_k * part_k.score(in); breakdown() lists every part's raw value and weight.
class CombinedReward : public RewardFunction {
 public:
  explicit CombinedReward(std::vector<WeightedReward> parts);
  // The parts' names joined by '+', each with ":weight" unless the weight is 1 (a spec string).
  std::string name() const override;
  double score(const RewardInput& in) const override;
  RewardBreakdown breakdown(const RewardInput& in) const override;
  const std::vector<WeightedReward>& parts() const { return parts_; }

 private:
  std::vector<WeightedReward> parts_;
};

// Makes a fresh reward; called once per make_reward that names it.
using RewardFactory = std::function<std::unique_ptr<RewardFunction>()>;

// Adds a reward under `name` (a lowercase letter, then lowercase letters, digits or '_'), used with
// `default_weight` when a spec gives none. Fails when the name is taken or malformed, or the
// factory is empty. Thread-safe.
void register_reward(const std::string& name, RewardFactory factory, double default_weight = 1.0);

// The registered names, sorted (the built-ins and every register_reward).
std::vector<std::string> registered_rewards();

// Parses a spec (see the file comment) into a CombinedReward; errors name `flag` and the spec.
std::unique_ptr<CombinedReward> make_reward(const std::string& spec,
                                            const std::string& flag = "--reward");

// reward.breakdown(inputs[i]) for every input, on `threads` std::threads (0: hardware
// concurrency), in input order. The result does not depend on the thread count (up to grader
// timeouts, which are wall-clock). An exception in a worker is rethrown after all have stopped.
std::vector<RewardBreakdown> score_batch(const RewardFunction& reward,
                                         const std::vector<RewardInput>& inputs, unsigned threads);

}  // namespace rqat::rl
