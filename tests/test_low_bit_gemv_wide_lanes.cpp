// The wide CUDA GEMV's threads on the CPU: cuda/low_bit_gemv_wide_lanes.cuh is the code every
// thread of the kernel runs, so running all threads of all CTAs here, on the arguments the CUDA
// dispatcher builds (ops/low_bit_gemv_call.h), and summing each CTA's partial sums checks the
// kernel's steps (16-byte loads of 1-4 blocks), its rows per CTA, its threads per row and its use
// of the shared unit arithmetic against the plain reference (dequantize, then a float32 matmul)
// without a GPU: every bit width, partial and per-channel groups, group padding, act-order, rows
// of W not a multiple of the CTA's, more steps than threads, 1 to 4 rows of x, float32 (1e-5 of
// sum |x w|) and bf16 (1e-2). Which shapes the wide kernel takes (whole steps) and its geometry
// are checked too; the kernel's launch and its reduction run in test_low_bit_matmul_cuda.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch.h"

#include <vector>

#include "cuda/low_bit_gemv_wide_lanes.cuh"
#include "ops/low_bit_gemv_call.h"
#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"
#include "test_util.h"

using namespace rqat;

namespace {

// Every thread of every CTA, then each CTA's sum over its threads; counts the steps taken, which
// must be each row's steps exactly once.
struct RunWideOnHost {
  const cuda::LowBitGemvArgs& a;
  int64_t* threads_run;
  template <int Bits, int Rows, typename In>
  int run() const {
    constexpr int R = cuda::kWideRows<Bits>;
    REQUIRE(cuda::wide_geometry(a).rows_per_cta == R);
    const int threads = cuda::wide_geometry(a).threads();
    for (int64_t cta = 0; cta < cuda::wide_ctas(a); ++cta) {
      std::vector<float> sums(R * Rows, 0.f);
      for (int thread = 0; thread < threads; ++thread) {
        float acc[R][Rows];
        cuda::wide_thread_partial_sums<Bits, Rows, In>(a, cta, thread, acc);
        for (int i = 0; i < R; ++i)
          for (int r = 0; r < Rows; ++r) sums[i * Rows + r] += acc[i][r];
        ++*threads_run;
      }
      for (int i = 0; i < R; ++i)
        for (int r = 0; r < a.rows; ++r)
          if (cta * R + i < a.out) cuda::store_output<In>(a, cta * R + i, r, sums[i * Rows + r]);
    }
    return 0;
  }
};

struct Shape {
  int64_t out, in, group;  // group -1: per channel
  bool permuted;
};

}  // namespace

TEST_CASE("the wide GEMV's threads, run on the CPU, equal the reference") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(40);
  const Shape shapes[] = {
      {40, 128, 32, false},  {33, 200, 64, true},  // partial last group, act-order
      {7, 480, 48, false},   {8, 100, -1, false},  // group padding; per channel
      {6, 4608, 128, false}, {9, 33, -1, true},    // several steps a thread; W3 not whole steps
      {5, 272, 16, true},    {3, 96, 32, false},   // odd blocks per row: W2 and W3 fall back
      {17, 8192, 128, true}};                      // 256 blocks: 128 threads of 2 steps (W4)
  int wide_cases = 0;
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      const ops::LowBitWeight w =
          test::random_low_bit_weight(gen, bits, s.out, s.in, s.group, s.permuted);
      const at::Tensor dense = ops::dequantize_low_bit(w);
      const int64_t blocks = w.groups() * w.blocks_per_group();
      const int steps = bits == 2 ? 2 : (bits == 3 ? 4 : 1);
      for (int64_t rows : {1, 2, 3, 4}) {
        INFO("W" << bits << " " << s.out << "x" << s.in << " g" << s.group << " rows " << rows);
        const at::Tensor x = at::randn({rows, s.in}, gen);
        ops::LowBitGemvCall call = ops::prepare_low_bit_gemv(x, w);
        const bool whole_steps = blocks % steps == 0;
        REQUIRE(cuda::wide_gemv_applies(call.args) == whole_steps);
        if (!whole_steps) {
          CHECK(cuda::visit_low_bit_gemv_wide(call.args, RunWideOnHost{call.args, nullptr}, -1) ==
                -1);
          continue;
        }
        ++wide_cases;
        const at::Tensor magnitude = at::matmul(x.abs(), dense.abs().t()).clamp_min(1e-3);
        const auto worst = [&](const at::Tensor& got, const at::Tensor& expected) {
          return ((got.to(at::kFloat) - expected).abs() / magnitude).max().item<double>();
        };
        int64_t threads_run = 0;
        REQUIRE(cuda::visit_low_bit_gemv_wide(call.args, RunWideOnHost{call.args, &threads_run},
                                              -1) == 0);
        CHECK(threads_run == cuda::wide_ctas(call.args) * cuda::wide_geometry(call.args).threads());
        CHECK(worst(call.y, ops::low_bit_matmul_ref(x, w)) < 1e-5);
        const at::Tensor xb = x.to(at::kBFloat16);
        ops::LowBitGemvCall call_bf16 = ops::prepare_low_bit_gemv(xb, w);
        REQUIRE(cuda::visit_low_bit_gemv_wide(
                    call_bf16.args, RunWideOnHost{call_bf16.args, &threads_run}, -1) == 0);
        REQUIRE(call_bf16.y.scalar_type() == at::kBFloat16);
        CHECK(worst(call_bf16.y, ops::low_bit_matmul_ref(xb.to(at::kFloat), w)) < 1e-2);
      }
    }
  }
  CHECK(wide_cases >= 4 * 30);  // most shapes take the wide kernel
}

TEST_CASE("the wide GEMV's geometry: 16-byte steps, rows per CTA, threads per row") {
  // A step is 16 bytes of codes per load: 32 codes of W4, 64 of W2, 128 of W3 (three loads),
  // 32 of W8 (two loads).
  STATIC_REQUIRE(cuda::kWideSteps<4> * 32 * 4 / 8 == 16 * cuda::kWideLoads<4>);
  STATIC_REQUIRE(cuda::kWideSteps<2> * 32 * 2 / 8 == 16 * cuda::kWideLoads<2>);
  STATIC_REQUIRE(cuda::kWideSteps<3> * 32 * 3 / 8 == 16 * cuda::kWideLoads<3>);
  STATIC_REQUIRE(cuda::kWideSteps<8> * 32 * 8 / 8 == 16 * cuda::kWideLoads<8>);
  STATIC_REQUIRE(cuda::kWideLoads<4> == 1 && cuda::kWideLoads<2> == 1 && cuda::kWideLoads<3> == 3 &&
                 cuda::kWideLoads<8> == 2);
  STATIC_REQUIRE(cuda::kWideRows<4> == 8 && cuda::kWideRows<2> == 8 && cuda::kWideRows<3> == 4 &&
                 cuda::kWideRows<8> == 4);
  cuda::LowBitGemvArgs a;
  a.bits = 4;
  a.rows = 1;
  a.groups = 1;
  a.out = 1000;
  // Threads: up to 2 steps each, in whole warps, at most 256.
  for (auto [blocks, threads] :
       {std::pair{1, 32}, {64, 32}, {65, 64}, {96, 64}, {256, 128}, {512, 256}, {4096, 256}}) {
    a.blocks_per_group = blocks;
    CHECK(cuda::wide_geometry(a).steps_per_row == blocks);
    CHECK(cuda::wide_geometry(a).threads() == threads);
  }
  CHECK(cuda::wide_ctas(a) == 125);  // 8 rows a CTA
  a.bits = 3;
  a.blocks_per_group = 96;  // a 3,072-wide row: 24 steps of 4 blocks
  CHECK(cuda::wide_geometry(a).steps_per_row == 24);
  CHECK(cuda::wide_ctas(a) == 250);  // 4 rows a CTA
  CHECK(cuda::wide_gemv_applies(a));
  for (int64_t rows : {0, 5, 16}) {
    a.rows = rows;
    CHECK_FALSE(cuda::wide_gemv_applies(a));
  }
  a.rows = 4;
  a.bits = 5;
  CHECK_FALSE(cuda::wide_gemv_applies(a));
}

TEST_CASE("a block's unit words in registers are what the first GEMV loads from memory") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  alignas(16) uint32_t block[8];
  const at::Tensor words = at::randint(0, 1 << 30, {8}, gen, at::kLong);
  for (int i = 0; i < 8; ++i) block[i] = static_cast<uint32_t>(words[i].item<int64_t>() * 3);
  const auto same = [&](auto bits) {
    constexpr int kBits = decltype(bits)::value;
    for (int half = 0; half < 2; ++half) {
      uint32_t from_memory[cuda::kUnitWords<kBits>], from_registers[cuda::kUnitWords<kBits>];
      cuda::load_unit_words<kBits>(block, half, from_memory);
      cuda::unit_words_of_block<kBits>(block, half, from_registers);
      for (int k = 0; k < cuda::kUnitWords<kBits>; ++k) CHECK(from_memory[k] == from_registers[k]);
    }
  };
  same(std::integral_constant<int, 2>{});
  same(std::integral_constant<int, 3>{});
  same(std::integral_constant<int, 4>{});
  same(std::integral_constant<int, 8>{});
}
