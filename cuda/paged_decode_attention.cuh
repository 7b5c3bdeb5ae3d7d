// Launcher of the paged decode attention kernel (flash-decoding over a block-table KV cache). The
// maths, the layouts and the checked entry point are in lib/ops/paged_attention.h; this layer takes
// raw pointers, sizes and a stream only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace rqat::cuda {

enum class PagedDType { kF32, kBF16, kF16 };

struct PagedDecodeArgs {
  const void* q = nullptr;                // (batch, heads, head_dim), contiguous, `dtype`
  const void* key_pool = nullptr;         // (num_blocks, block_size, kv_heads, head_dim), `dtype`
  const void* value_pool = nullptr;       // same shape as key_pool
  const int32_t* block_tables = nullptr;  // (batch, max_blocks)
  const int32_t* context_lens = nullptr;  // (batch), each in [1, max_blocks * block_size]
  void* out = nullptr;                    // (batch, heads, head_dim), `dtype`
  void* workspace = nullptr;              // paged_decode_workspace_bytes(...) bytes, any content
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, block_size = 0, max_blocks = 0;
  float scale = 1.0f;
  PagedDType dtype = PagedDType::kBF16;
};

// Head sizes the kernel is compiled for.
bool paged_decode_head_dim_supported(int64_t head_dim);

// Scratch the launch needs for the split-K partial results (depends only on the shapes, so a
// captured CUDA graph can keep one buffer).
size_t paged_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t head_dim,
                                    int64_t max_blocks, int64_t block_size);

// Returns a cudaError_t (0 on success).
int launch_paged_decode_attention(const PagedDecodeArgs& args, cudaStream_t stream);

}  // namespace rqat::cuda
