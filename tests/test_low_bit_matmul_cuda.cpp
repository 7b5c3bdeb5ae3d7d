// The packed low-bit GEMV CUDA kernel (cuda/low_bit_gemv.cu) against the plain reference
// (dequantize, then a float32 matmul) on awkward shapes: every bit width, partial groups,
// per-channel groups of a width not a multiple of 32, groups of 48 and 16 (padding units, one-unit
// groups), more units than threads, act-order permutations, 1 to 16 rows, bf16 and fp16 inputs; and
// rows beyond 16 through the dense fallback. Without a GPU (or without CUDA kernels in
// the build) it prints why and exits 77, which CTest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include "catch.h"

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
  const Shape shapes[] = {{40, 128, 32, false},   {33, 200, 64, true},   {8, 100, -1, false},
                          {9, 33, -1, true},      {7, 480, 48, false},   {5, 272, 16, true},
                          {6, 4608, 128, false},  {256, 4096, 128, true}, {4096, 4096, 128, false}};
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      const ops::LowBitWeight cpu =
          test::random_low_bit_weight(gen, bits, s.out, s.in, s.group, s.permuted);
      const ops::LowBitWeight gpu = cpu.to(at::Device(at::kCUDA));
      CHECK(at::equal(ops::dequantize_low_bit(gpu).cpu(), ops::dequantize_low_bit(cpu)));
      for (int64_t rows : {1, 2, 3, 5, 8, 13, 16, 17}) {
        INFO("W" << bits << " " << s.out << "x" << s.in << " g" << s.group << " rows " << rows);
        const at::Tensor x = at::randn({rows, s.in}, gen);
        const at::Tensor want = ops::low_bit_matmul_ref(x, cpu);
        const at::Tensor magnitude =
            at::matmul(x.abs(), ops::dequantize_low_bit(cpu).abs().t()).clamp_min(1e-3);
        // The largest error relative to sum |x w| of each output.
        const auto worst = [&](const at::Tensor& got, const at::Tensor& expected) {
          return ((got.to(at::kFloat) - expected).abs() / magnitude).max().item<double>();
        };
        // The GEMV itself up to its 16 rows (in any --kernels mode), the dispatcher's dense path
        // beyond.
        const auto multiply = [&](const at::Tensor& in) {
          return rows <= 16 ? ops::low_bit_matmul_cuda_kernel(in, gpu)
                            : ops::low_bit_matmul(in, gpu);
        };
        CHECK(worst(multiply(x.cuda()).cpu(), want) < 1e-5);
        const at::Tensor got_bf16 = multiply(x.cuda().to(at::kBFloat16)).cpu();
        CHECK(worst(got_bf16, ops::low_bit_matmul_ref(x.to(at::kBFloat16).to(at::kFloat), cpu)) <
              1e-2);
        const at::Tensor got_half = multiply(x.cuda().to(at::kHalf)).cpu();
        REQUIRE(got_half.scalar_type() == at::kHalf);
        CHECK(worst(got_half, ops::low_bit_matmul_ref(x.to(at::kHalf).to(at::kFloat), cpu)) < 1e-2);
      }
    }
  }
}

int main(int argc, char** argv) {
  if (const int skip = rqat::test::cuda_tests_skipped()) return skip;
  return Catch::Session().run(argc, argv);
}
