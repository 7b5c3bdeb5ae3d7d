// Multi-query-row attention over a boolean mask, the sequence (prefill and training) path of the
// decoder: out = softmax(q k^T * scale, masked) v with grouped-query heads.
//
// On the CPU in float32 with small heads (see below) it runs the fused kernels of
// ops/attention_kernel.h (one pass per query row over its allowed keys, no scores tensor, the
// backward recomputing the probabilities from the saved log-sum-exp). ATen's flash attention for
// the CPU does poorly with the small heads of the models QAT is tried on first (stories260K has
// head_dim 8): bench/bench_attention prints both. Everything else goes to
// at::scaled_dot_product_attention.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace rqat::ops {

// When attention() takes the fused kernels, from bench/bench_attention (forward + backward against
// SDPA, 1 and 2 threads, on a CPU with AVX-512): heads up to kFusedAttentionMaxDim (2.4x-3.3x
// faster at 8, 1.2x-1.4x at 32, 1.0x-1.3x at 64; at 128 SDPA's block GEMMs are as fast or faster),
// and at least one task per thread: the fused kernels split the work over (batch row, key/value
// head) pairs only, SDPA also over blocks of queries, so a batch of one with two key/value heads on
// a 16-thread machine goes to SDPA.
inline constexpr int64_t kFusedAttentionMaxDim = 64;

// The fused kernels' error against the float64 reference, relative to the largest entry: their
// test's (and their self-check's) tolerance for the output and for the gradients.
inline constexpr double kFusedAttentionTolerance = 1e-5;
inline constexpr double kFusedAttentionGradTolerance = 5e-5;

// q: (B, heads, T, D); k, v: (B, kv_heads, S, D), heads a multiple of kv_heads (query head h uses
// key/value head h / (heads / kv_heads), as in Hugging Face); mask: bool, (B or 1, 1, T, S), true
// where a query may see a key, or undefined for no mask. scale defaults to 1/sqrt(D). Returns
// (B, heads, T, D). A query row that may see no key gives zeros (ATen's math path gives NaN);
// rqat's masks always let a query see itself. Differentiable in q, k and v. The fused kernels run
// only where ops/kernel_choice.h allows (--kernels; checked at first use in auto).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask);

// Whether the fused kernels can take these operands (float32 CPU tensors, a bool mask, heads up to
// kFusedAttentionMaxDim, a task per thread).
bool fused_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& mask);

// Whether the fused kernels beat SDPA on this CPU: only where their 16-lane vectors are one
// register, i.e. x86-64 with AVX-512 (and non-x86 CPUs, where they were not measured slower). On
// AVX2 (an AMD EPYC, 2026-12-01) bench/bench_attention measured them at 0.1x-0.4x of SDPA for every
// shape, the 16-lane vectors being split over register pairs that spill; there attention() takes
// SDPA. The RQAT_FUSED_ATTENTION environment variable (0 or 1) overrides the choice (benchmarks).
bool fused_attention_faster_here();

// The fused kernels themselves, whatever the head size (tests and the benchmark call them
// directly); the operands must satisfy fused_attention_supported but for the head size limit.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask);

// The same maths as ATen composites (repeat the key/value heads, matmul, masked softmax in float32,
// matmul), any dtype and device: the reference the fused kernels are tested against. A query row
// with no allowed key gives zeros here too.
at::Tensor attention_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask);

}  // namespace rqat::ops
