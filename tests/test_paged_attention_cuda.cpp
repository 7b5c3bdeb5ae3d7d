// The paged decode attention CUDA kernel (cuda/paged_decode_attention.cu) against
// paged_decode_attention_ref computed on the CPU in float64 from the same (dtype-rounded) data:
// context lengths at and around block and partition boundaries, partitions past the context,
// GQA ratios that fill, leave part of and exceed one CTA's chunk of query heads, shuffled block
// tables with unused trailing entries, every supported head size, f32/bf16/f16; and a CUDA graph
// captured once and replayed after the context lengths change on the device. Without a GPU (or
// without CUDA kernels in the build) it prints why and exits 77, which CTest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include "catch.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#ifdef RQAT_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "ops/paged_attention.h"
#include "test_util.h"

namespace {

// Lengths around block sizes 16 and 32 and the kernel's 512-position partitions. Each batch is one
// launch: the first fits one partition (the kernel writes the output itself), the others need the
// merge, with partitions past most sequences' lengths.
const std::vector<int32_t> kShortLens{1, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257};
const std::vector<int32_t> kMediumLens{511, 512, 513, 1, 1000, 17, 1024, 1025};
const std::vector<int32_t> kLongLens{8192, 4097, 1, 2000};

struct Case {
  int64_t head_dim, kv_heads, ratio, block_size;
  at::ScalarType dtype;
  std::vector<int32_t> lens;
  double scale = 0;  // <= 0: 1/sqrt(head_dim)
};

struct Inputs {
  at::Tensor q, key_pool, value_pool, block_tables, context_lens;  // on the CPU
  int64_t longest;
};

// Seeded random operands already rounded to the case's dtype. q has std 2, so the scores have std
// about 2 and the softmax is peaked enough for the max subtraction to matter. Block ids are a
// random permutation (rows non-contiguous, in no order) and every row has 3 trailing entries past
// its longest use, all valid block ids as the contract asks; a few pool blocks belong to no row.
Inputs make_inputs(const Case& c, at::Generator& gen) {
  const int64_t batch = static_cast<int64_t>(c.lens.size());
  const int64_t heads = c.kv_heads * c.ratio;
  const int64_t longest = *std::max_element(c.lens.begin(), c.lens.end());
  const int64_t max_blocks = (longest + c.block_size - 1) / c.block_size + 3;
  const int64_t num_blocks = batch * max_blocks + 5;
  Inputs in;
  in.q = (at::randn({batch, heads, c.head_dim}, gen) * 2).to(c.dtype);
  in.key_pool = at::randn({num_blocks, c.block_size, c.kv_heads, c.head_dim}, gen).to(c.dtype);
  in.value_pool = at::randn({num_blocks, c.block_size, c.kv_heads, c.head_dim}, gen).to(c.dtype);
  in.block_tables = at::randperm(num_blocks, gen, at::kLong)
                        .narrow(0, 0, batch * max_blocks)
                        .view({batch, max_blocks})
                        .to(at::kInt);
  in.context_lens = at::tensor(c.lens, at::kInt);
  in.longest = longest;
  return in;
}

at::Tensor reference(const Inputs& in, double scale) {
  return rqat::ops::paged_decode_attention_ref(in.q.to(at::kDouble), in.key_pool.to(at::kDouble),
                                               in.value_pool.to(at::kDouble), in.block_tables,
                                               in.context_lens, scale, /*max_context=*/in.longest);
}

// Tolerance |gpu - ref| <= atol + rtol |ref|. The kernel computes in float32 (scores, exp2 of the
// max-subtracted scores, sums over at most 64 terms per lane before tree sums), so against the
// float64 reference its error is a few 1e-6 on outputs that are averages of N(0, 1) values:
// atol = rtol = 1e-5 for float32. bf16 and f16 outputs are the float32 result rounded once, which
// moves it by at most half a unit in the last place, 2^-8 |x| for bf16 (8 significant bits) and
// 2^-11 |x| for f16 (11 bits): rtol is twice that, atol 2e-5 covers the float32 part.
double rtol_for(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return std::ldexp(1.0, -7);
  if (dtype == at::kHalf) return std::ldexp(1.0, -10);
  return 1e-5;
}
double atol_for(at::ScalarType dtype) { return dtype == at::kFloat ? 1e-5 : 2e-5; }

void check_case(const Case& c, at::Generator& gen) {
  INFO("head_dim " << c.head_dim << " kv_heads " << c.kv_heads << " ratio " << c.ratio
                   << " block_size " << c.block_size << " dtype " << c10::toString(c.dtype)
                   << " longest " << *std::max_element(c.lens.begin(), c.lens.end()));
  const Inputs in = make_inputs(c, gen);
  const auto ref = reference(in, c.scale);
  auto q = in.q.cuda(), key_pool = in.key_pool.cuda();
  REQUIRE(rqat::ops::paged_decode_kernel_supported(q, key_pool));
  const auto out = rqat::ops::paged_decode_attention_cuda(  // the kernel, in any --kernels mode
      q, key_pool, in.value_pool.cuda(), in.block_tables.cuda(), in.context_lens.cuda(), c.scale);
  REQUIRE(out.scalar_type() == c.dtype);
  REQUIRE(out.sizes() == in.q.sizes());
  const auto got = out.cpu().to(at::kDouble);
  const auto err = (got - ref).abs();
  const auto bound = atol_for(c.dtype) + rtol_for(c.dtype) * ref.abs();
  INFO("max |error| " << err.max().item<double>() << ", max |error| - bound "
                      << (err - bound).max().item<double>());
  CHECK(at::isfinite(got).all().item<bool>());
  CHECK((err <= bound).all().item<bool>());
}

}  // namespace

TEST_CASE("paged decode kernel equals the reference: head sizes 64 and 128, every GQA ratio") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  int64_t n = 0;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t head_dim : {64, 128}) {
      for (int64_t block_size : {16, 32}) {
        for (int64_t ratio : {1, 2, 4, 7}) {
          for (const auto* lens : {&kShortLens, &kMediumLens, &kLongLens}) {
            if (lens == &kLongLens && block_size != 16) continue;  // the slowest reference
            const int64_t kv_heads = 1 + n++ % 3;                  // the kv head stride varies too
            check_case({head_dim, kv_heads, ratio, block_size, dtype, *lens}, gen);
          }
        }
      }
    }
  }
}

TEST_CASE("paged decode kernel equals the reference: small and large head sizes, f16") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(32);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t head_dim : {8, 16, 32, 256}) {
      for (int64_t ratio : {1, 7}) {
        for (const auto* lens : {&kShortLens, &kMediumLens, &kLongLens})
          check_case({head_dim, 2, ratio, 16, dtype, *lens}, gen);
      }
    }
  }
  for (int64_t head_dim : {8, 64, 128}) {
    for (int64_t ratio : {2, 4}) {
      for (const auto* lens : {&kShortLens, &kMediumLens, &kLongLens})
        check_case({head_dim, 2, ratio, 32, at::kHalf, *lens}, gen);
    }
  }
}

TEST_CASE("paged decode kernel equals the reference: query head chunks and explicit scale") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(33);
  // Ratio 3 leaves one of a CTA's 4 query heads empty; 12 and 16 take two CTAs per kv head (8 + 4,
  // 8 + 8); 5 is a chunk of 8 with 3 empty heads.
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t ratio : {3, 5, 12, 16}) {
      for (const auto* lens : {&kShortLens, &kLongLens})
        check_case({128, 2, ratio, 16, dtype, *lens}, gen);
    }
  }
  check_case({64, 2, 2, 16, at::kFloat, kMediumLens, /*scale=*/0.3}, gen);
  check_case({128, 4, 1, 32, at::kBFloat16, kLongLens, /*scale=*/0.05}, gen);
}

TEST_CASE("paged decode on CUDA falls back to the reference for head sizes without a kernel") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(34);
  const Case c{48, 2, 2, 16, at::kFloat, kMediumLens};
  const Inputs in = make_inputs(c, gen);
  auto q = in.q.cuda(), key_pool = in.key_pool.cuda();
  CHECK_FALSE(rqat::ops::paged_decode_kernel_supported(q, key_pool));
  const auto out = rqat::ops::paged_decode_attention(
      q, key_pool, in.value_pool.cuda(), in.block_tables.cuda(), in.context_lens.cuda());
  const auto ref = reference(in, 0);
  CHECK(at::allclose(out.cpu().to(at::kDouble), ref, 1e-5, 1e-5));
}

#ifdef RQAT_WITH_CUDA
TEST_CASE("paged decode kernel replays in a CUDA graph after the lengths change on the device") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(35);
  // The grid depends on max_blocks only: a graph captured while every sequence is short must
  // cover 8192 positions when replayed.
  Case c{128, 2, 4, 16, at::kBFloat16, {8192, 5, 600, 1}};
  Inputs in = make_inputs(c, gen);
  auto q = in.q.cuda(), key_pool = in.key_pool.cuda(), value_pool = in.value_pool.cuda();
  auto block_tables = in.block_tables.cuda();
  auto lens = at::tensor(std::vector<int32_t>{5, 17, 1, 600}, at::kInt).cuda();

  // Warm-up outside the capture (module loading, allocator), then capture on a side stream.
  rqat::ops::paged_decode_attention_cuda(q, key_pool, value_pool, block_tables, lens);
  torch::cuda::synchronize();
  at::cuda::CUDAGraph graph;
  at::Tensor out;
  {
    at::cuda::CUDAStreamGuard guard(at::cuda::getStreamFromPool());
    graph.capture_begin();
    out = rqat::ops::paged_decode_attention_cuda(q, key_pool, value_pool, block_tables, lens);
    graph.capture_end();
  }
  torch::cuda::synchronize();

  const auto check_replay = [&](const std::vector<int32_t>& new_lens) {
    INFO("lengths " << new_lens[0] << " " << new_lens[1] << " " << new_lens[2] << " "
                    << new_lens[3]);
    lens.copy_(at::tensor(new_lens, at::kInt));  // on the device, in place: the graph reads it
    q.copy_((at::randn(q.sizes(), gen) * 2).to(q.scalar_type()));
    graph.replay();
    torch::cuda::synchronize();
    Inputs now = in;
    now.q = q.cpu();
    now.context_lens = at::tensor(new_lens, at::kInt);
    now.longest = *std::max_element(new_lens.begin(), new_lens.end());
    const auto ref = reference(now, 0);
    const auto got = out.cpu().to(at::kDouble);
    const auto bound = atol_for(c.dtype) + rtol_for(c.dtype) * ref.abs();
    INFO("max |error| " << (got - ref).abs().max().item<double>());
    CHECK(((got - ref).abs() <= bound).all().item<bool>());
  };
  check_replay({5, 17, 1, 600});
  check_replay({8192, 513, 1, 4000});
  check_replay({1, 8192, 8191, 16});
}
#endif

int main(int argc, char** argv) {
  if (const int skip = rqat::test::cuda_tests_skipped()) return skip;
  return Catch::Session().run(argc, argv);
}
