// The CUDA GEMV's threads on the CPU: cuda/low_bit_gemv_lanes.cuh is the code every thread of the
// kernel runs (nvcc compiles the same functions), so running all threads of all CTAs here, on the
// very arguments the CUDA dispatcher builds (ops/low_bit_gemv_call.h), and summing each CTA's
// partial sums checks the kernel's indexing, decode and arithmetic against the plain reference
// (dequantize, then a float32 matmul) without a GPU: every bit width, partial and per-channel
// groups, groups not a multiple of 32 (padding units), act-order, more units than threads, 1 to 16
// rows, vector and element-wise loads of x, float32 (1e-5 of sum |x w|) and bf16 in and out
// (1e-2). The kernel's own launch and its shuffle/shared-memory sum run in
// test_low_bit_matmul_cuda.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/BFloat16.h>
#include "catch.h"

#include <cstring>
#include <utility>
#include <vector>

#include "cuda/low_bit_gemv_lanes.cuh"
#include "ops/low_bit_gemv_call.h"
#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"
#include "test_util.h"

using namespace rqat;

namespace {

// Every thread of every CTA, then each CTA's sum over its threads.
struct RunOnHost {
  const cuda::LowBitGemvArgs& a;
  template <int Bits, int Rows, typename In>
  int run() const {
    for (int64_t cta = 0; cta < a.ctas(); ++cta) {
      float sums[cuda::kGemvRowsPerCta][Rows] = {};
      for (int thread = 0; thread < a.threads(); ++thread) {
        float acc[cuda::kGemvRowsPerCta][Rows];
        cuda::thread_partial_sums<Bits, Rows, In>(a, cta, thread, acc);
        for (int i = 0; i < cuda::kGemvRowsPerCta; ++i)
          for (int r = 0; r < Rows; ++r) sums[i][r] += acc[i][r];
      }
      for (int i = 0; i < cuda::kGemvRowsPerCta; ++i)
        for (int r = 0; r < a.rows; ++r) {
          const int64_t o = cta * cuda::kGemvRowsPerCta + i;
          if (o < a.out) cuda::store_output<In>(a, o, r, sums[i][r]);
        }
    }
    return 0;
  }
};

at::Tensor gemv_on_host(const at::Tensor& x, const ops::LowBitWeight& w) {
  const ops::LowBitGemvCall call = ops::prepare_low_bit_gemv(x, w);
  REQUIRE(cuda::visit_low_bit_gemv(call.args, RunOnHost{call.args}, -1) == 0);
  return call.y;
}

// A visitor that launches nothing (argument checks only).
struct Count {
  template <int, int, typename>
  int run() const {
    return 0;
  }
};

struct Shape {
  int64_t out, in, group;  // group -1: per channel
  bool permuted;
};

}  // namespace

TEST_CASE("the GEMV kernel's threads, run on the CPU, equal the reference") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20);
  const Shape shapes[] = {
      {40, 128, 32, false}, {33, 200, 64, true},    // partial last group, act-order
      {8, 100, -1, false},  {9, 33, -1, true},      // per channel, 100 and 33 not multiples of 16
      {7, 480, 48, false},  {6, 4608, 128, false},  // padding units; 288 units for 256 threads
      {5, 272, 16, true}};                          // groups of one unit
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      const ops::LowBitWeight w =
          test::random_low_bit_weight(gen, bits, s.out, s.in, s.group, s.permuted);
      const at::Tensor dense = ops::dequantize_low_bit(w);
      for (int64_t rows : {1, 2, 3, 5, 8, 13, 16}) {
        INFO("W" << bits << " " << s.out << "x" << s.in << " g" << s.group << " rows " << rows);
        const at::Tensor x = at::randn({rows, s.in}, gen);
        const at::Tensor magnitude = at::matmul(x.abs(), dense.abs().t()).clamp_min(1e-3);
        // The largest error relative to sum |x w| of each output.
        const auto worst = [&](const at::Tensor& got, const at::Tensor& expected) {
          return ((got.to(at::kFloat) - expected).abs() / magnitude).max().item<double>();
        };
        const at::Tensor got = gemv_on_host(x, w);
        REQUIRE(got.scalar_type() == at::kFloat);
        CHECK(worst(got, ops::low_bit_matmul_ref(x, w)) < 1e-5);
        const at::Tensor xb = x.to(at::kBFloat16);
        const at::Tensor got_bf16 = gemv_on_host(xb, w);
        REQUIRE(got_bf16.scalar_type() == at::kBFloat16);
        CHECK(worst(got_bf16, ops::low_bit_matmul_ref(xb.to(at::kFloat), w)) < 1e-2);
      }
    }
  }
}

TEST_CASE("the GEMV reads x element-wise when its rows are not 16-byte aligned") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  const at::Tensor codes = at::randint(0, 16, {12, 256}, gen, at::kInt);
  const at::Tensor scales = at::rand({12, 2}, gen) + 0.1;
  const at::Tensor zeros = at::randint(0, 16, {12, 2}, gen, at::kFloat);
  const ops::LowBitWeight w = ops::pack_low_bit(codes, scales, zeros, 4, 128, {}, "t");
  const at::Tensor storage = at::randn({257}, gen);
  const at::Tensor x = storage.narrow(0, 1, 256).view({1, 256});  // 4 bytes past an aligned start
  const ops::LowBitGemvCall call = ops::prepare_low_bit_gemv(x, w);
  CHECK_FALSE(call.args.x_vector);
  CHECK(ops::prepare_low_bit_gemv(x.clone(), w).args.x_vector);
  REQUIRE(cuda::visit_low_bit_gemv(call.args, RunOnHost{call.args}, -1) == 0);
  const at::Tensor want = ops::low_bit_matmul_ref(x, w);
  CHECK(at::allclose(call.y, want, 1e-5, 1e-4));
}

TEST_CASE("the GEMV's launch arguments are checked") {
  cuda::LowBitGemvArgs a;
  a.bits = 4;
  for (int64_t rows : {0, 17}) {
    a.rows = rows;
    CHECK(cuda::visit_low_bit_gemv(a, Count{}, -1) == -1);
  }
  // Threads per CTA: a unit each, in whole warps, at most 256.
  a.groups = 1;
  for (auto [blocks, threads] :
       {std::pair{1, 32}, {16, 32}, {17, 64}, {32, 64}, {128, 256}, {1000, 256}}) {
    a.blocks_per_group = blocks;
    CHECK(a.threads() == threads);
  }
  a.rows = 3;
  a.bits = 5;
  CHECK(cuda::visit_low_bit_gemv(a, Count{}, -1) == -1);
  a.bits = 3;
  CHECK(cuda::visit_low_bit_gemv(a, Count{}, -1) == 0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(22);
  const ops::LowBitWeight w =
      ops::pack_low_bit(at::randint(0, 4, {4, 64}, gen, at::kInt), at::ones({4, 2}),
                        at::zeros({4, 2}), 2, 32, {}, "t");
  CHECK_THROWS_WITH(ops::prepare_low_bit_gemv(at::randn({17, 64}), w),
                    Catch::Contains("at most 16"));
}

TEST_CASE("bf16 outputs round as c10::BFloat16 does") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
  const at::Tensor values = at::cat({at::randn({4096}, gen) * 1e3, at::randn({4096}, gen) * 1e-30,
                                     at::tensor({0.f, -0.f, INFINITY, -INFINITY, NAN, 3.4e38f})});
  const float* v = values.data_ptr<float>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    cuda::Bf16 ours{};
    cuda::store_value(&ours, v[i]);
    const c10::BFloat16 theirs(v[i]);
    INFO(v[i]);
    CHECK(ours.bits == theirs.x);
  }
}
