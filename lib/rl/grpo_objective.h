// The GRPO policy objective: group-relative advantages from scalar rewards, and the clipped
// surrogate loss over the sampled response tokens, with the loss aggregations of GRPO, DAPO and
// Dr. GRPO, an optional k3 KL penalty to a reference policy and optional truncated importance
// sampling against the rollout engine's log-probabilities.
//
// Advantages. Each prompt gets a group of G sampled completions with rewards r_1..r_G.
//   GRPO (DeepSeekMath, Shao et al. 2024, "outcome supervision"): A_i = (r_i - mean) / (std + eps),
//     eps 1e-4 as TRL's, std being the SAMPLE standard deviation sqrt(sum (r_j - mean)^2 / (G - 1))
//     as TRL's GRPOTrainer computes it (torch.std is unbiased by default), so advantages match
//     TRL's.
//   Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): A_i = r_i - mean; dividing
//     by the std weights easy and hard prompts (low std) more than the rest, a bias it removes.
// A group whose rewards are all exactly equal carries no learning signal: its advantages are
// exactly 0 in both modes (not a rounding residue of r - mean) and it is reported as degenerate so
// the loop can skip it (DAPO's dynamic sampling filters such groups). With G = 1 every group is
// degenerate.
//
// Per-token objective, to MINIMIZE, at a response token t of sequence i (PPO's clipped surrogate,
// Schulman et al. 2017, as GRPO uses it):
//   ratio = exp(new_logp - old_logp)
//   pg    = -min(ratio * A_i, clip(ratio, 1 - clip_low, 1 + clip_high) * A_i)
//   l_it  = w_it * pg + kl_beta * k3_it
// k3 (Schulman's "approximating KL divergence" note, as GRPO writes its KL term): with
// d = ref_logp - new_logp, k3 = exp(d) - d - 1, an unbiased, always non-negative per-sample
// estimate of KL(pi || ref) for tokens sampled from pi. The gradient flows through new_logp.
// clip_high > clip_low is DAPO's "clip-higher" (Yu et al. 2025): it lets the probability of
// unlikely tokens with positive advantage grow further, against entropy collapse.
// w_it is 1, or with tis_cap > 0 truncated importance sampling (Yao et al. 2025, "Your efficient
// RL framework secretly brings you off-policy RL training"): w = min(exp(old_logp -
// rollout_logp), tis_cap), detached, correcting for the rollout engine sampling from a slightly
// different distribution than the training forward computes. It weighs the policy-gradient term
// only, as verl does (the KL penalty is left as is).
// Where the min picks the clipped term (A > 0 and ratio > 1 + clip_high, or A < 0 and ratio <
// 1 - clip_low) the token's policy-gradient term is a constant: its gradient is exactly 0.
//
// Aggregation over the masked tokens (n_i of them in sequence i, N in total, B sequences):
//   kSequenceMean (GRPO):        mean over sequences with n_i > 0 of (sum_t l_it / n_i). A
//     sequence masked out entirely is absent, not a zero that dilutes the others (TRL divides by
//     B instead). Long answers get less weight per token (GRPO's length bias).
//   kTokenMean (DAPO):            sum_it l_it / N; every token weighs the same.
//   kConstantNormalizer (Dr. GRPO): sum_it l_it / (B * max_response_tokens); the normalizer does
//     not depend on the lengths, so there is no length bias, and B counts every sequence.
// With no masked token at all the loss is 0 (still a graph; zero gradient).
//
// Masked-out positions never enter the math: their log-probabilities may hold anything (NaN, inf)
// without changing the loss or giving non-finite gradients.
// Precision: float64 inputs are computed in float64 (finite-difference tests), anything else in
// float32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/enum_names.h"

namespace rqat::rl {

enum class AdvantageMode {
  kGroupNormalized,  // (r - mean) / (sample std + eps): GRPO, as TRL
  kMeanCentered,     // r - mean: Dr. GRPO
  kCount,            // not a mode
};
constexpr EnumNames<AdvantageMode> enum_names(AdvantageMode) { return {"grpo", "dr_grpo"}; }

enum class LossAggregation {
  kSequenceMean,        // per-sequence token mean, then mean over sequences (GRPO)
  kTokenMean,           // sum over all tokens / number of tokens (DAPO)
  kConstantNormalizer,  // sum over all tokens / (B * max_response_tokens) (Dr. GRPO)
  kCount,               // not an aggregation
};
constexpr EnumNames<LossAggregation> enum_names(LossAggregation) {
  return {"seq_mean", "token_mean", "constant"};
}

struct Advantages {
  std::vector<double> values;             // one per sequence, group-major like the rewards
  std::vector<uint8_t> degenerate_group;  // one per group: 1 when all its rewards are equal
  int64_t degenerate_groups = 0;          // how many groups are degenerate
};

// rewards: num_groups * group_size values in group-major order (group g holds
// [g * group_size, (g + 1) * group_size)). Fails on group_size < 1, a size that is not a multiple
// of group_size, a non-finite reward or eps < 0.
Advantages group_advantages(const std::vector<double>& rewards, int64_t group_size,
                            AdvantageMode mode, double eps = 1e-4);

struct GrpoLossOptions {
  double clip_low = 0.2;   // ratio clipped below at 1 - clip_low, in [0, 1]
  double clip_high = 0.2;  // and above at 1 + clip_high, >= 0 (DAPO's clip-higher: > clip_low)
  LossAggregation aggregation = LossAggregation::kSequenceMean;
  int64_t max_response_tokens = 0;  // kConstantNormalizer: > 0 and >= every sequence's n_i
  double kl_beta = 0.0;             // >= 0; > 0 needs ref_logp
  double tis_cap = 0.0;             // >= 0; > 0 needs rollout_logp
};

// The statistics are 0-dim float64 tensors on the log-probs' device, detached: reading them is a
// host sync, which a training step does once for all its micro-batches.
struct GrpoLoss {
  at::Tensor loss;           // 0-dim, with graph back to new_logp
  at::Tensor clip_fraction;  // share of masked tokens whose clipped term was active (0 with none)
  at::Tensor mean_ratio;     // mean of exp(new - old) over masked tokens (1 with none)
  at::Tensor kl;             // mean k3 over masked tokens; 0 without ref_logp (even if kl_beta 0)
  at::Tensor tokens;         // number of masked tokens
};

// new_logp (B, T): log-probabilities of the sampled response tokens under the policy being
// trained, with grad. old_logp (B, T): under the policy that generated them (treated as constant).
// mask (B, T): bool, integer or float 0/1, nonzero at the response tokens that count.
// advantages (B): per sequence. ref_logp (B, T), optional: the reference policy, for kl_beta and
// the kl statistic. rollout_logp (B, T), optional: the rollout engine's, for tis_cap.
// Log-prob tensors share one device; mask and advantages are moved to it. Checks that read values
// (advantages finite, a floating-point mask holding 0/1, the constant normalizer's bound) run on
// inputs given on the CPU; on another device they would cost a host sync per call and are left to
// the caller (grpo's step passes CPU advantages, bool masks and max_new_tokens as the bound).
GrpoLoss grpo_loss(const at::Tensor& new_logp, const at::Tensor& old_logp, const at::Tensor& mask,
                   const at::Tensor& advantages, const GrpoLossOptions& options,
                   const at::Tensor& ref_logp = {}, const at::Tensor& rollout_logp = {});

// k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0, 0 when
// equal), computed as expm1(d) - d for accuracy at small d. Same shape as logp; ref_logp is
// detached, the gradient flows to logp.
at::Tensor k3_kl(const at::Tensor& logp, const at::Tensor& ref_logp);

}  // namespace rqat::rl
