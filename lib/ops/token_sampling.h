// Token choice for a batch of logits rows, on the logits' device: greedy, temperature, top-k,
// top-p (nucleus) and min-p, with the log-probabilities of the drawn token. Only (B) tensors come
// out, so a decode step copies a few values per row to the host instead of the logits.
//
// Semantics (transformers' warper order: temperature, then top-k, then top-p, then min-p):
// - greedy rows: the argmax of the raw logits, ties to the lowest id (as torch.argmax).
// - p = softmax(x / T). Candidates are ordered by logit, descending, ties by ascending id; every
//   filter keeps a prefix of that order:
//   top-k keeps every token whose logit is >= the k-th largest (boundary ties kept, as
//   TopKLogitsWarper); top-p keeps a token while the mass of the tokens before it (at the
//   temperature, over the top-k survivors) is < top_p times the survivors' mass: the smallest
//   prefix with mass >= top_p, never fewer than one token (TopPLogitsWarper); min-p keeps p >=
//   min_p * p_max (MinPLogitsWarper).
// - The draw: with u in [0, 1) given per row, the token is the lowest id i in the kept set whose
//   cumulative kept mass in id order exceeds u * (kept mass): the inverse CDF over ids. Any fixed
//   order samples the same distribution; id order needs no sort of the kept set.
// - logprob = x[token] - logsumexp(x); tempered_logprob = x[token] / T - logsumexp(x / T) (the
//   policy at the sampling temperature, before filtering; equals logprob for greedy rows).
//
// Masses are accumulated in float64, so the CPU kernel (histogram selection, no sort) and the
// sort-based reference agree except where a prefix mass lies within rounding of its cut.
#pragma once

#include <ATen/Tensor.h>

namespace rqat::ops {

// Per-row settings, each (B) on the logits' device.
struct SamplingTensors {
  at::Tensor inv_temperature;  // float32: 1 / T, and 1 for greedy rows
  at::Tensor greedy;           // bool
  at::Tensor top_k;            // int64: 0 = off
  at::Tensor top_p;            // float64: 1 = off
  at::Tensor min_p;            // float64: 0 = off
  at::Tensor uniform;          // float64 in [0, 1): the draw of this step
  // Host-side: every row is greedy, so the filters (a sort per row on the GPU) are skipped.
  bool all_greedy = false;
};

struct SampledTokens {
  at::Tensor token;             // int64 (B)
  at::Tensor logprob;           // float32 (B)
  at::Tensor tempered_logprob;  // float32 (B)
};

// logits: (B, V), any float dtype (computed in float32). CPU rows go to the fused kernel (one pass
// per filter over each row, rows in parallel) unless ops/kernel_choice.h picks its twin;
// everything else to sample_tokens_ref. Non-finite log-sum-exp of a row is not checked here (the
// caller checks the returned log-probabilities).
SampledTokens sample_tokens(const at::Tensor& logits, const SamplingTensors& settings);

// The fused CPU kernel itself (tests and the self-check call it).
SampledTokens sample_tokens_cpu_kernel(const at::Tensor& logits, const SamplingTensors& settings);

// ATen composites on any device (a stable sort per row): the reference, and the CUDA path.
SampledTokens sample_tokens_ref(const at::Tensor& logits, const SamplingTensors& settings);

// The kept set of each row (bool (B, V)) as the reference computes it, for tests.
at::Tensor kept_tokens_ref(const at::Tensor& logits, const SamplingTensors& settings);

}  // namespace rqat::ops
