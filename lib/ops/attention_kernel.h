// The fused float32 CPU kernels behind ops::attention (see attention.h for the maths and the
// autograd wrapper). One task per (batch row, key/value head) covers the query heads that share
// that key/value head, so each block of keys is transposed once and read by all of them. Keys are
// taken in blocks that fit the cache; per query row only the span of keys its mask allows is
// visited (half the work under a causal mask), with an online softmax across blocks in the
// forward, and the backward recomputes the probabilities from the log-sum-exp the forward saved
// (the FlashAttention scheme), so no (T, S) tensor is ever stored.
#pragma once

#include <cstdint>

namespace rqat::ops {

struct AttentionProblem {
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, dim = 0;
  float scale = 1.0f;
  // Row-major bool bytes (mask_batch, queries, keys), mask_batch 1 (shared) or batch; nullptr:
  // every key allowed.
  const uint8_t* mask = nullptr;
  int64_t mask_batch = 1;
};

// q (B, heads, T, D), k and v (B, kv_heads, S, D), all contiguous. Writes out (B, heads, T, D) and
// lse (B, heads, T): the log-sum-exp of each row's scaled scores (+inf for a row with no allowed
// key, whose output is zero).
void attention_forward_cpu(const AttentionProblem& p, const float* q, const float* k,
                           const float* v, float* out, float* lse);

// The gradients of q, k and v (same layouts as the inputs, overwritten) from dout and the forward's
// out and lse.
void attention_backward_cpu(const AttentionProblem& p, const float* q, const float* k,
                            const float* v, const float* out, const float* lse, const float* dout,
                            float* dq, float* dk, float* dv);

}  // namespace rqat::ops
