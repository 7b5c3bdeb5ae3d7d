// The packed low-bit GEMV CUDA kernel (cuda/low_bit_gemv.cu) against the plain reference
// (dequantize, then a float32 matmul) on awkward shapes: every bit width, partial groups,
// per-channel groups of a width not a multiple of 32, act-order permutations, 1 to 16 rows, bf16
// inputs; and rows beyond 16 through the dense fallback. Without a GPU (or without CUDA kernels in
// the build) it prints why and exits 77, which CTest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"
#include "test_util.h"

using namespace rqat;

TEST_CASE("low-bit GEMV on CUDA equals the CPU reference") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  struct Shape {
    int64_t out, in, group;
    bool permuted;
  };
  const Shape shapes[] = {{40, 128, 32, false}, {33, 200, 64, true},   {8, 100, -1, false},
                          {9, 33, -1, true},    {256, 4096, 128, true}, {4096, 4096, 128, false}};
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      const int64_t group = s.group > 0 ? s.group : s.in;
      const int64_t groups = (s.in + group - 1) / group;
      const at::Tensor codes = at::randint(0, int64_t{1} << bits, {s.out, s.in}, gen, at::kInt);
      const at::Tensor scales = at::rand({s.out, groups}, gen) * 0.1 + 0.01;
      const at::Tensor zeros = at::randint(0, int64_t{1} << bits, {s.out, groups}, gen, at::kFloat);
      const at::Tensor order = s.permuted ? at::randperm(s.in, gen, at::kLong) : at::Tensor();
      const ops::LowBitWeight cpu = ops::pack_low_bit(codes, scales, zeros, bits, s.group, order, "t");
      const ops::LowBitWeight gpu = cpu.to(at::Device(at::kCUDA));
      CHECK(at::equal(ops::dequantize_low_bit(gpu).cpu(), ops::dequantize_low_bit(cpu)));
      for (int64_t rows : {1, 2, 5, 8, 16, 17}) {
        INFO("W" << bits << " " << s.out << "x" << s.in << " g" << s.group << " rows " << rows);
        const at::Tensor x = at::randn({rows, s.in}, gen);
        const at::Tensor want = ops::low_bit_matmul_ref(x, cpu);
        const at::Tensor magnitude =
            at::matmul(x.abs(), ops::dequantize_low_bit(cpu).abs().t()).clamp_min(1e-3);
        const at::Tensor got = ops::low_bit_matmul(x.cuda(), gpu).cpu();
        CHECK(((got - want).abs() / magnitude).max().item<double>() < 1e-5);
        const at::Tensor got_bf16 = ops::low_bit_matmul(x.cuda().to(at::kBFloat16), gpu).cpu();
        const at::Tensor want_bf16 = ops::low_bit_matmul_ref(x.to(at::kBFloat16).to(at::kFloat), cpu);
        CHECK(((got_bf16.to(at::kFloat) - want_bf16).abs() / magnitude).max().item<double>() < 1e-2);
      }
    }
  }
}

int main(int argc, char** argv) {
  if (const int skip = rqat::test::cuda_tests_skipped()) return skip;
  return Catch::Session().run(argc, argv);
}
