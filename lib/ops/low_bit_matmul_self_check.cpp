// The first-use self-check of the packed low-bit kernels (ops/kernel_self_checks.h): the CPU kernel
// or the CUDA GEMV against y = x W^T in float64 from the dequantized codes, in their tests'
// measure (the error of each output relative to its sum |x| |w|, kLowBitMatmulTolerance for
// float32 inputs, kLowBitMatmulTolerance16 for bf16). Cases: every bit width; groups of 32, of 48
// (padding units), of 64 with a short last group, and one per row of a width not a multiple of 32;
// act-order permutations; one row, a few, and the kernels' row limits (16 on CUDA, the CPU
// kernel's pass of 16 and its remainder); on the CPU also the int8 kernel, and the many-row GEMM
// over dequantized tiles (17 and 64 rows).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <span>

#include "ops/kernel_self_checks.h"
#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"

namespace rqat::ops {

namespace {

struct LowBitCase {
  int bits;
  int64_t out, in, group;
  bool act_order;
  int64_t rows;
  at::ScalarType dtype;
};

LowBitWeight random_weight(const LowBitCase& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t levels = int64_t{1} << c.bits, width = c.group > 0 ? c.group : c.in;
  const int64_t groups = (c.in + width - 1) / width;
  const auto codes = at::randint(0, levels, {c.out, c.in}, gen, at::kInt);
  const auto scales = at::rand({c.out, groups}, gen) * 0.1 + 0.01;
  const auto zeros = at::randint(0, levels, {c.out, groups}, gen, at::kFloat);
  const auto order = c.act_order ? at::randperm(c.in, gen, at::kLong) : at::Tensor();
  return pack_low_bit(codes, scales, zeros, c.bits, c.group, order, "low_bit_matmul self-check");
}

std::string case_name(const LowBitCase& c) {
  return fmt::format("W{} {}x{} g{}{} rows {} {}", c.bits, c.out, c.in, c.group,
                     c.act_order ? " act-order" : "", c.rows, c10::toString(c.dtype));
}

}  // namespace

KernelCheck check_low_bit_matmul(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const bool cuda = device.is_cuda();
  const LowBitCase low_bit_cases[] = {
      {2, 40, 128, 32, false, 1, at::kFloat},
      {3, 33, 200, 64, true, 3, at::kFloat},
      {4, 7, 480, 48, false, 16, at::kFloat},
      {8, 9, 33, -1, true, 2, at::kFloat},
      {4, 33, 200, 64, true, 1, at::kBFloat16},
      {3, 24, 256, 128, false, cuda ? 5 : 17, at::kFloat},
      {2, 16, 96, 32, true, cuda ? 16 : 64, at::kBFloat16},
  };
  uint64_t seed = 0x5eed0003;
  for (const auto& c : low_bit_cases) {
    const std::string name = case_name(c);
    cases.run(name, [&] {
      const LowBitWeight cpu = random_weight(c, seed++);
      const LowBitWeight weight = cpu.to(device);
      const auto x = check_randn({c.rows, c.in}, seed++, device, c.dtype);
      // On the CPU the many-row cases go through the GEMM over dequantized tiles, as
      // low_bit_matmul sends them.
      const auto got = cuda                            ? low_bit_matmul_cuda_kernel(x, weight)
                       : c.rows <= low_bit_gemm_rows() ? low_bit_matmul_cpu_kernel(x, weight)
                                                       : low_bit_matmul_cpu_gemm(x, weight);
      const auto w64 = dequantize_low_bit(cpu).to(device, at::kDouble);
      const auto want = at::matmul(x.to(at::kDouble), w64.t());
      const double tolerance =
          c.dtype == at::kFloat ? kLowBitMatmulTolerance : kLowBitMatmulTolerance16;
      cases.compare(got, want, low_bit_error_scale(x, weight), tolerance);
    });
  }
  // The int8 kernel (--low-bit-activations int8) on the CPU, in its own measure: the bound of
  // rounding x to 8-bit blocks (ops/low_bit_matmul_int8_kernel.h) plus float32 noise.
  const LowBitCase int8_cases[] = {
      {4, 40, 128, 32, false, 1, at::kFloat},
      {3, 33, 200, 64, true, 3, at::kFloat},
      {2, 7, 480, 48, false, 6, at::kBFloat16},
  };
  for (const auto& c : cuda ? std::span<const LowBitCase>() : std::span(int8_cases)) {
    const std::string name = "int8 activations " + case_name(c);
    cases.run(name, [&] {
      const LowBitWeight weight = random_weight(c, seed++);
      const auto x = check_randn({c.rows, c.in}, seed++, device, c.dtype);
      const auto got = low_bit_matmul_cpu_int8_kernel(x, weight);
      const auto want =
          at::matmul(x.to(at::kDouble), dequantize_low_bit(weight).to(at::kDouble).t());
      cases.compare(got, want, low_bit_int8_error_scale(x, weight), kLowBitInt8Tolerance);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
