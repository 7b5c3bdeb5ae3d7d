// Token choice from rows of logits: greedy, temperature, top-k, top-p (nucleus) and min-p, with the
// log-probability of the chosen token under the unmodified model distribution (GRPO needs it).
//
// Semantics (transformers' warper order: temperature, then top-k, then top-p, then min-p):
// - greedy (temperature <= 0): argmax of the raw logits, ties to the lowest id (as torch.argmax).
// - The candidates are ordered by raw logit, descending, ties by ascending id. Every filter keeps a
//   prefix of that order:
//   top-k keeps every token whose logit is >= the k-th largest (ties at the boundary are all kept,
//   as TopKLogitsWarper); top-p keeps a token while the probability mass (at the temperature,
//   renormalized over the top-k survivors) of the tokens before it is < top_p, i.e. the smallest
//   prefix whose mass is >= top_p, never fewer than one token (TopPLogitsWarper); min-p keeps
//   tokens with p >= min_p * p_max (MinPLogitsWarper).
// - The draw: one uniform u in [0, 1) per step from the sample's own generator; the token is the
// first
//   of the kept prefix whose cumulative mass exceeds u * (mass of the kept prefix) (inverse CDF).
// - Uniform: u = (gen.random64() >> 11) * 2^-53 from an at::CPUGeneratorImpl seeded with
//   sample_seed(request seed, sample index) = splitmix64(splitmix64(seed) + sample index).
#pragma once

#include <ATen/Tensor.h>
#include <ATen/core/Generator.h>

#include <cstdint>
#include <vector>

#include "generation/sampling.h"

namespace rqat::generation {

struct TokenChoice {
  int32_t token = 0;
  float logprob = 0;  // log_softmax(raw logits)[token]
  // log_softmax(logits / temperature)[token]: the log-probability under the distribution the
  // token was drawn from before top-k/top-p/min-p filtering (RL's policy at that temperature);
  // equals logprob for greedy rows and temperature 1.
  float tempered_logprob = 0;
};

uint64_t splitmix64(uint64_t x);
uint64_t sample_seed(uint64_t request_seed, uint64_t sample_index);
at::Generator make_sample_generator(uint64_t request_seed, uint64_t sample_index);  // CPU generator
double next_uniform(at::Generator& gen);  // one draw in [0, 1)

// Checks the ranges of temperature, top_k, top_p and min_p; errors are one line naming the field.
void validate_sampling(const SamplingParams& params);

// The kept candidates of one row after temperature/top-k/top-p/min-p, in sampling order (logit
// descending, ties by id). logits: (V) float32. For greedy params: the argmax alone.
std::vector<int32_t> kept_tokens(const at::Tensor& logits, const SamplingParams& params);

// Chooses one token for each row of logits (B, V) (any float dtype, any device). params[b] and
// gens[b] belong to row b; gens[b] is not touched for greedy rows (and may be null there). Batched
// tensor ops do the per-row reductions (max, log-sum-exp, softmax at the temperature); the filters
// and the draw run on the host on the CPU copy.
std::vector<TokenChoice> sample_rows(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<at::Generator*>& gens);

// One row (V): convenience wrapper of sample_rows.
TokenChoice sample_token(const at::Tensor& logits, const SamplingParams& params,
                         at::Generator* gen);

}  // namespace rqat::generation
