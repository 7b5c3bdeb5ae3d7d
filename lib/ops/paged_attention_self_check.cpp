// The first-use self-check of the paged decode attention CUDA kernel (ops/kernel_self_checks.h):
// against paged_decode_attention_ref in float64 on the same device, within its test's bound
// |out - ref| <= atol + rtol |ref| (paged_decode_rtol/atol; the error below is |out - ref| /
// (|ref| + atol / rtol) against rtol). Cases: one cached position; lengths around block
// boundaries with grouped-query heads; a GQA ratio of 7 in f16 with blocks of 32; a context long
// enough for several partitions of the flash-decoding split, in bf16.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ops/kernel_self_checks.h"
#include "ops/paged_attention.h"

namespace rqat::ops {

namespace {

struct PagedCase {
  const char* name;
  int64_t head_dim, kv_heads, ratio, block_size;
  at::ScalarType dtype;
  std::vector<int32_t> lens;
};

}  // namespace

KernelCheck check_paged_decode_attention(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const PagedCase paged_cases[] = {
      {"one cached position, f32", 64, 1, 2, 16, at::kFloat, {1}},
      {"block boundaries, GQA 4, bf16", 128, 2, 4, 16, at::kBFloat16, {15, 16, 17, 33}},
      {"GQA 7, blocks of 32, f16", 64, 2, 7, 32, at::kHalf, {1, 40, 100}},
      {"1500 positions, GQA 2, bf16", 128, 2, 2, 16, at::kBFloat16, {1500, 3}},
  };
  uint64_t seed = 0x5eed0004;
  for (const auto& c : paged_cases) {
    cases.run(c.name, [&] {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
      const int64_t batch = static_cast<int64_t>(c.lens.size());
      const int64_t longest = *std::max_element(c.lens.begin(), c.lens.end());
      const int64_t max_blocks = (longest + c.block_size - 1) / c.block_size;
      const int64_t num_blocks = batch * max_blocks + 1;
      const int64_t heads = c.kv_heads * c.ratio;
      const auto q = (at::randn({batch, heads, c.head_dim}, gen) * 2).to(device, c.dtype);
      const auto pool_shape =
          std::vector<int64_t>{num_blocks, c.block_size, c.kv_heads, c.head_dim};
      const auto keys = at::randn(pool_shape, gen).to(device, c.dtype);
      const auto values = at::randn(pool_shape, gen).to(device, c.dtype);
      const auto tables = at::randperm(num_blocks, gen, at::kLong)
                              .narrow(0, 0, batch * max_blocks)
                              .view({batch, max_blocks})
                              .to(device, at::kInt);
      const auto lens = at::tensor(c.lens, at::kInt).to(device);
      const auto got = paged_decode_attention_cuda(q, keys, values, tables, lens);
      const auto want =
          paged_decode_attention_ref(q.to(at::kDouble), keys.to(at::kDouble),
                                     values.to(at::kDouble), tables, lens, 0, longest);
      const double rtol = paged_decode_rtol(c.dtype);
      cases.compare(got, want, want.abs() + paged_decode_atol(c.dtype) / rtol, rtol);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
