// Attention over a paged key/value cache (the generation engine's memory layout, after vLLM):
// keys and values of every sequence live in fixed-size blocks of one pool per layer, and a block
// table per sequence lists, in order, the blocks that hold its positions. Position p of a sequence
// is row p % block_size of block block_table[p / block_size].
//
// Pool layout: (num_blocks, block_size, kv_heads, head_dim), contiguous. One position's heads are
// adjacent, so writing the new tokens of a step is one index_copy over (num_blocks * block_size)
// rows, and a decode kernel reads each head's keys as head_dim contiguous values.
//
// Two entry points:
// - gather_paged(): the positions [0, length) of each sequence as a contiguous (B, kv_heads, S, D)
//   tensor, the input of ops::attention for prefill chunks that follow cached positions, and the
//   first half of the reference;
// - paged_decode_attention(): one query per sequence (a decode step) against its context_lens[b]
//   cached positions. On CUDA with bf16/f16/f32 operands it runs the flash-decoding kernel of
//   cuda/paged_decode_attention.cu; everywhere else (and when ops/kernel_choice.h says so)
//   paged_decode_attention_ref, which gathers and then does the plain maths (matmul, softmax in
//   float32, matmul), and is what tests compare with.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace rqat::ops {

// pool: (num_blocks, block_size, kv_heads, D); block_tables: int32 (B, max_blocks) (entries past
// a sequence's length are ignored but must be valid block indices); length: positions to gather
// (<= max_blocks * block_size). Returns (B, kv_heads, length, D) in the pool's dtype.
at::Tensor gather_paged(const at::Tensor& pool, const at::Tensor& block_tables, int64_t length);

// q: (B, heads, D), heads a multiple of kv_heads (query head h reads kv head h / (heads /
// kv_heads)); key_pool, value_pool: (num_blocks, block_size, kv_heads, D); block_tables: int32 (B,
// max_blocks); context_lens: int32 (B), each in [1, max_blocks * block_size]. scale <= 0 means
// 1/sqrt(D). Returns (B, heads, D) in q's dtype. Checks shapes, dtypes and devices with one-line
// errors; context lengths are trusted (they live on the device).
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& key_pool,
                                  const at::Tensor& value_pool, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, double scale = 0);

// The reference: gather_paged, then masked softmax(q k^T * scale) v with ATen composites, the
// softmax in float32. Any device and float dtype. max_context bounds the gathered positions
// (<= 0: max_blocks * block_size), so callers that know the longest context avoid gathering more.
at::Tensor paged_decode_attention_ref(const at::Tensor& q, const at::Tensor& key_pool,
                                      const at::Tensor& value_pool, const at::Tensor& block_tables,
                                      const at::Tensor& context_lens, double scale = 0,
                                      int64_t max_context = 0);

// Whether the CUDA kernel takes these operands (CUDA build, CUDA tensors, a supported head size
// and dtype). paged_decode_attention runs it there unless ops/kernel_choice.h picks the reference,
// its twin (--kernels; checked at first use in auto).
bool paged_decode_kernel_supported(const at::Tensor& q, const at::Tensor& key_pool);

// The CUDA kernel itself (the self-check and tests call it); operands as paged_decode_attention's,
// which paged_decode_kernel_supported must accept.
at::Tensor paged_decode_attention_cuda(const at::Tensor& q, const at::Tensor& key_pool,
                                       const at::Tensor& value_pool, const at::Tensor& block_tables,
                                       const at::Tensor& context_lens, double scale = 0);

// The kernel's tolerance against the float64 reference, |out - ref| <= atol + rtol |ref| (its
// test's and its self-check's): float32 sums for float32 outputs; for bf16 and f16 also the one
// rounding of the output (half a unit in the last place, doubled).
double paged_decode_rtol(at::ScalarType dtype);
double paged_decode_atol(at::ScalarType dtype);

}  // namespace rqat::ops
