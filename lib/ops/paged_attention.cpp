// See paged_attention.h. Shapes, dtypes and devices are checked here; the CUDA kernel
// (cuda/paged_decode_attention.cu) takes raw pointers and sizes only.
#include "ops/paged_attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "io/error.h"
#include "ops/kernel_choice.h"

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "cuda/paged_decode_attention.cuh"
#include "ops/kernel_mark.h"
#endif

namespace rqat::ops {

namespace {

void check_pool(const at::Tensor& pool, const char* what) {
  if (pool.dim() != 4)
    fail("paged attention: {} must be (num_blocks, block_size, kv_heads, head_dim), got {} dims",
         what, pool.dim());
}

void check_block_tables(const at::Tensor& block_tables, const at::Tensor& pool) {
  if (block_tables.dim() != 2 || block_tables.scalar_type() != at::kInt)
    fail("paged attention: block_tables must be int32 (batch, max_blocks)");
  if (block_tables.device() != pool.device())
    fail("paged attention: block_tables on {} but the pool on {}", block_tables.device().str(),
         pool.device().str());
}

struct DecodeShape {
  int64_t batch, heads, kv_heads, head_dim, block_size, max_blocks;
  double scale;
};

DecodeShape check_decode(const at::Tensor& q, const at::Tensor& key_pool,
                         const at::Tensor& value_pool, const at::Tensor& block_tables,
                         const at::Tensor& context_lens, double scale) {
  check_pool(key_pool, "key_pool");
  check_pool(value_pool, "value_pool");
  if (key_pool.sizes() != value_pool.sizes())
    fail("paged attention: key_pool and value_pool shapes differ");
  check_block_tables(block_tables, key_pool);
  if (q.dim() != 3)
    fail("paged attention: q must be (batch, heads, head_dim), got {} dims", q.dim());
  DecodeShape s{q.size(0),
                q.size(1),
                key_pool.size(2),
                key_pool.size(3),
                key_pool.size(1),
                block_tables.size(1),
                scale};
  if (q.size(2) != s.head_dim)
    fail("paged attention: q head_dim {} but the pool's is {}", q.size(2), s.head_dim);
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    fail("paged attention: {} query heads are not a multiple of {} kv heads", s.heads, s.kv_heads);
  if (block_tables.size(0) != s.batch)
    fail("paged attention: block_tables has {} rows for a batch of {}", block_tables.size(0),
         s.batch);
  if (context_lens.dim() != 1 || context_lens.size(0) != s.batch ||
      context_lens.scalar_type() != at::kInt || context_lens.device() != q.device())
    fail("paged attention: context_lens must be int32 ({}) on q's device", s.batch);
  if (key_pool.device() != q.device() || key_pool.scalar_type() != q.scalar_type())
    fail("paged attention: q is {} on {} but the pool {} on {}", c10::toString(q.scalar_type()),
         q.device().str(), c10::toString(key_pool.scalar_type()), key_pool.device().str());
  if (s.scale <= 0) s.scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  return s;
}

}  // namespace

at::Tensor gather_paged(const at::Tensor& pool, const at::Tensor& block_tables, int64_t length) {
  check_pool(pool, "pool");
  check_block_tables(block_tables, pool);
  const int64_t batch = block_tables.size(0), block_size = pool.size(1);
  const int64_t blocks = (length + block_size - 1) / block_size;
  if (length < 1 || blocks > block_tables.size(1))
    fail("paged attention: {} positions need {} blocks, the block table has {}", length, blocks,
         block_tables.size(1));
  auto index = block_tables.narrow(1, 0, blocks).reshape({-1}).to(at::kLong);
  // (B * blocks, block_size, kv, D) -> (B, blocks * block_size, kv, D) -> (B, kv, length, D)
  auto gathered =
      pool.index_select(0, index).view({batch, blocks * block_size, pool.size(2), pool.size(3)});
  return gathered.narrow(1, 0, length).permute({0, 2, 1, 3});
}

at::Tensor paged_decode_attention_ref(const at::Tensor& q, const at::Tensor& key_pool,
                                      const at::Tensor& value_pool, const at::Tensor& block_tables,
                                      const at::Tensor& context_lens, double scale,
                                      int64_t max_context) {
  const auto s = check_decode(q, key_pool, value_pool, block_tables, context_lens, scale);
  const int64_t length = max_context > 0 ? max_context : s.max_blocks * s.block_size;
  auto k = gather_paged(key_pool, block_tables, length);  // (B, kv, S, D)
  auto v = gather_paged(value_pool, block_tables, length);
  const int64_t groups = s.heads / s.kv_heads;
  // The query heads of one kv head form one batched matmul: no repeat of k and v.
  auto scores = at::matmul(q.view({s.batch, s.kv_heads, groups, s.head_dim}), k.transpose(-1, -2))
                    .to(at::kFloat)
                    .mul_(s.scale);  // (B, kv, groups, S)
  auto positions = at::arange(length, context_lens.options().dtype(at::kLong)).view({1, 1, 1, -1});
  auto outside = positions >= context_lens.to(at::kLong).view({s.batch, 1, 1, 1});
  scores.masked_fill_(outside, -std::numeric_limits<float>::infinity());
  auto probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::matmul(probs, v).view({s.batch, s.heads, s.head_dim});
}

bool paged_decode_kernel_supported(const at::Tensor& q, const at::Tensor& key_pool) {
#ifdef RQAT_WITH_CUDA
  const auto dtype = q.scalar_type();
  return q.is_cuda() && key_pool.is_cuda() && key_pool.dim() == 4 &&
         (dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat) &&
         cuda::paged_decode_head_dim_supported(key_pool.size(3));
#else
  (void)q;
  (void)key_pool;
  return false;
#endif
}

double paged_decode_rtol(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return std::ldexp(1.0, -7);
  if (dtype == at::kHalf) return std::ldexp(1.0, -10);
  return 1e-5;
}

double paged_decode_atol(at::ScalarType dtype) { return dtype == at::kFloat ? 1e-5 : 2e-5; }

at::Tensor paged_decode_attention_cuda(const at::Tensor& q, const at::Tensor& key_pool,
                                       const at::Tensor& value_pool, const at::Tensor& block_tables,
                                       const at::Tensor& context_lens, double scale) {
  if (!paged_decode_kernel_supported(q, key_pool))
    fail("paged attention: no CUDA kernel for q {} {} on {} with head_dim {}", c10::str(q.sizes()),
         c10::toString(q.scalar_type()), q.device().str(),
         key_pool.dim() == 4 ? key_pool.size(3) : -1);
#ifdef RQAT_WITH_CUDA
  RQAT_MARK_KERNEL("rqat::paged_decode_attention");
  const c10::cuda::CUDAGuard on_device(q.device());  // the launch goes to q's device's stream
  const auto s = check_decode(q, key_pool, value_pool, block_tables, context_lens, scale);
  if (!key_pool.is_contiguous() || !value_pool.is_contiguous())
    fail("paged attention: the key and value pools must be contiguous");
  auto qc = q.contiguous();
  auto tables = block_tables.contiguous(), lens = context_lens.contiguous();
  auto out = at::empty_like(qc);
  const size_t bytes =
      cuda::paged_decode_workspace_bytes(s.batch, s.heads, s.head_dim, s.max_blocks, s.block_size);
  auto workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
  cuda::PagedDecodeArgs args;
  args.q = qc.data_ptr();
  args.key_pool = key_pool.data_ptr();
  args.value_pool = value_pool.data_ptr();
  args.block_tables = tables.data_ptr<int32_t>();
  args.context_lens = lens.data_ptr<int32_t>();
  args.out = out.data_ptr();
  args.workspace = workspace.data_ptr();
  args.batch = s.batch;
  args.heads = s.heads;
  args.kv_heads = s.kv_heads;
  args.head_dim = s.head_dim;
  args.block_size = s.block_size;
  args.max_blocks = s.max_blocks;
  args.scale = static_cast<float>(s.scale);
  args.dtype = q.scalar_type() == at::kBFloat16 ? cuda::PagedDType::kBF16
               : q.scalar_type() == at::kHalf   ? cuda::PagedDType::kF16
                                                : cuda::PagedDType::kF32;
  const int err =
      cuda::launch_paged_decode_attention(args, c10::cuda::getCurrentCUDAStream().stream());
  if (err != 0)
    fail("paged attention: CUDA kernel failed: {}",
         cudaGetErrorString(static_cast<cudaError_t>(err)));
  // Test hook (ops/kernel_choice.h): just over atol + rtol |out|.
  if (kernel_fault(Kernel::kPagedDecodeAttention)) {
    const double rtol = paged_decode_rtol(q.scalar_type());
    perturb_kernel_output(out, rtol,
                          out.abs().to(at::kFloat) + paged_decode_atol(q.scalar_type()) / rtol);
  }
  return out;
#else
  (void)value_pool;
  (void)block_tables;
  (void)context_lens;
  (void)scale;
  return {};
#endif
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& key_pool,
                                  const at::Tensor& value_pool, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, double scale) {
  if (paged_decode_kernel_supported(q, key_pool) &&
      use_custom_kernel(Kernel::kPagedDecodeAttention, q.device()))
    return paged_decode_attention_cuda(q, key_pool, value_pool, block_tables, context_lens, scale);
  return paged_decode_attention_ref(q, key_pool, value_pool, block_tables, context_lens, scale);
}

}  // namespace rqat::ops
