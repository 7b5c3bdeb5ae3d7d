// Log-probabilities of sampled completions under a policy, computed by a full-sequence (training)
// forward: the quantity GRPO's ratio, KL and entropy are built from.
//
// Each row is prompt + completion, LEFT-padded to the longest row (CausalLM's convention:
// positions count real tokens only, so padding changes nothing). Completions therefore end at the
// last column, and the log-probability of completion token j sits at a fixed offset from the end.
// The policy is the tempered distribution softmax(logits / T) the rollouts were sampled from, so
// at the same weights these log-probs equal the generation engine's tempered_logprobs.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/decoder.h"

namespace rqat::rl {

struct PolicySequence {
  std::span<const int32_t> prompt;
  std::span<const int32_t> completion;
};

struct PolicyBatch {
  at::Tensor input_ids;       // (B, T) int64, left-padded
  at::Tensor attention_mask;  // (B, T) int64, 1 = token
  // (B, T - 1) bool: column c is completion token c + 1 of input_ids, i.e. the log-prob at column
  // c is that of the token at c + 1 given tokens <= c.
  at::Tensor completion_mask;
  int64_t completion_tokens = 0;
};

PolicyBatch make_policy_batch(std::span<const PolicySequence> rows, int64_t pad_id,
                              c10::Device device = c10::kCPU);

struct PolicyLogprobs {
  at::Tensor logp;     // (B, T - 1) float32: log pi_T(token) at every column (0 where masked out)
  at::Tensor entropy;  // (B, T - 1) float32 entropy of pi_T, detached; undefined unless asked
};

// Forward of `model` (autograd as the caller's mode), then log_softmax(logits / temperature).
PolicyLogprobs policy_logprobs(model::CausalLM& model, const PolicyBatch& batch, double temperature,
                               bool with_entropy);

// The log-probs of the completion tokens as one (B, T - 1) tensor from per-row vectors (e.g. the
// rollout's), aligned like PolicyBatch::completion_mask (0 elsewhere).
at::Tensor align_completion_values(const PolicyBatch& batch,
                                   const std::vector<std::span<const float>>& values);

}  // namespace rqat::rl
