// Token choice for the generation engine: per-request sampling settings become per-row tensors,
// ops::sample_tokens chooses on the logits' device (semantics in ops/token_sampling.h), and only
// the chosen ids and their log-probabilities come back to the host.
//
// Randomness is counter-based: the uniform of a draw is a hash of (request seed, sample index,
// token position), with no generator state. A sample's tokens therefore do not depend on batch
// size, on which other prompts share its steps, or on preemption and recomputation:
//   u = (splitmix64(sample_seed(seed, sample) ^ splitmix64(position)) >> 11) * 2^-53,
//   sample_seed(seed, sample) = splitmix64(splitmix64(seed) + sample).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

#include "generation/sampling.h"
#include "ops/token_sampling.h"

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
// The uniform in [0, 1) of the draw of token `position` (0 = first generated token).
double sample_uniform(uint64_t request_seed, uint64_t sample_index, uint64_t position);

// Checks the ranges of temperature, top_k, top_p and min_p; errors are one line naming the field.
void validate_sampling(const SamplingParams& params);

// Per-row settings on `device`, built on the host and moved in one copy.
ops::SamplingTensors sampling_tensors(const std::vector<const SamplingParams*>& params,
                                      const std::vector<double>& uniforms, c10::Device device);

// The kept candidates of one row (V) after temperature/top-k/top-p/min-p, in candidate order
// (logit descending, ties by id). For greedy params: the argmax alone.
std::vector<int32_t> kept_tokens(const at::Tensor& logits, const SamplingParams& params);

// One token for each row of logits (B, V) (any float dtype, any device): params[b] and
// uniforms[b] belong to row b (the uniform is ignored for greedy rows). Only the (B) results are
// copied to the host; *host_bytes, when given, grows by their size. A row whose logits are not
// finite is a one-line error.
std::vector<TokenChoice> sample_rows(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<double>& uniforms,
                                     int64_t* host_bytes = nullptr);

// Copies chosen tokens (from ops::sample_tokens) to the host: the engine's one device-to-host copy
// of a step; *host_bytes, when given, grows by its size. Rows whose log-probability is not finite
// (NaN or infinite logits) are a one-line error.
std::vector<TokenChoice> fetch_choices(const ops::SampledTokens& chosen,
                                       int64_t* host_bytes = nullptr);

// One row (V): convenience wrapper of sample_rows.
TokenChoice sample_token(const at::Tensor& logits, const SamplingParams& params, double uniform);

}  // namespace rqat::generation
