// Packed low-bit weights (ops/low_bit_weight.h) and their CPU kernel (ops/low_bit_matmul.h)
// against closed forms and the plain reference: the packing round-trips every code exactly, the
// dequantized weight is exactly (code - zero) * scale in the inputs' own order, and the kernel's
// y = x W^T agrees with the reference (dequantize, then a float32 matmul) within float32
// summation-order tolerance, on awkward shapes: in-features not a multiple of the group or of 32,
// 3-bit codes, per-channel groups, act-order column permutations, 1 to 70 rows, bf16 inputs.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"
#include "test_util.h"

using namespace rqat;

namespace {

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

struct Case {
  int bits;
  int64_t out, in, group;  // group -1: per channel
  bool permuted, symmetric;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "W" << c.bits << " " << c.out << "x" << c.in << " g" << c.group
    << (c.permuted ? " act-order" : "") << (c.symmetric ? " sym" : " asym");
  return s.str();
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {4, 40, 128, 32, false, false}, {4, 33, 200, 64, true, false},  // partial last group
      {2, 17, 96, 32, false, true},   {2, 24, 130, 128, true, false}, // 2 groups, second 2 wide
      {3, 31, 160, 32, true, false},  {3, 8, 100, -1, false, true},   // per channel, 100 % 32
      {3, 19, 75, 64, false, false},  {8, 12, 64, 32, true, false},
      {8, 9, 33, -1, false, false},   {4, 5, 7, -1, true, true},      // fewer columns than a block
  };
  return all;
}

struct Quantized {
  at::Tensor codes;   // (out, in) int32, original column order
  at::Tensor scales;  // (out, groups)
  at::Tensor zeros;   // (out, groups)
  at::Tensor order;   // (in) int64: kernel column j is input order[j]; undefined: identity
  int64_t group = 0;
};

Quantized random_quantized(const Case& c, uint64_t seed) {
  auto gen = generator(seed);
  Quantized q;
  q.group = c.group > 0 ? c.group : c.in;
  const int64_t groups = (c.in + q.group - 1) / q.group;
  const int64_t levels = int64_t{1} << c.bits;
  q.codes = at::randint(0, levels, {c.out, c.in}, gen, at::kInt);
  q.scales = at::rand({c.out, groups}, gen, at::kFloat) * 0.1 + 0.01;
  q.zeros = c.symmetric ? at::full({c.out, groups}, levels / 2, at::kFloat)
                        : at::randint(0, levels, {c.out, groups}, gen, at::kFloat);
  if (c.permuted) q.order = at::randperm(c.in, gen, at::kLong);
  return q;
}

// Kernel column order: column j holds input order[j].
ops::LowBitWeight pack(const Case& c, const Quantized& q) {
  const at::Tensor kernel_codes = q.order.defined() ? q.codes.index_select(1, q.order) : q.codes;
  return ops::pack_low_bit(kernel_codes, q.scales, q.zeros, c.bits, c.group, q.order, "test");
}

// (code - zero) * scale with the group of input i being the group of its kernel column.
at::Tensor closed_form(const Case& c, const Quantized& q) {
  at::Tensor kernel_group = at::arange(c.in, at::kLong).div(q.group, "floor");
  at::Tensor group_of_input = kernel_group;
  if (q.order.defined()) {
    group_of_input = at::empty_like(kernel_group);
    group_of_input.index_copy_(0, q.order, kernel_group);
  }
  return (q.codes.to(at::kFloat) - q.zeros.index_select(1, group_of_input)) *
         q.scales.index_select(1, group_of_input);
}

}  // namespace

TEST_CASE("low-bit packing round-trips codes and dequantizes exactly", "[low_bit]") {
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    INFO(describe(c));
    const Quantized q = random_quantized(c, 100 + i);
    const ops::LowBitWeight w = pack(c, q);
    CHECK(w.codes.size(1) == w.groups() * w.blocks_per_group() * c.bits);
    const at::Tensor kernel_codes = q.order.defined() ? q.codes.index_select(1, q.order) : q.codes;
    CHECK(at::equal(ops::unpack_low_bit_codes(w), kernel_codes));
    CHECK(at::equal(ops::dequantize_low_bit(w), closed_form(c, q)));  // exact, not close
    // Exactly `bits` bits per code when the groups are whole blocks of 32.
    if (c.in % 32 == 0 && (c.group < 0 || c.group % 32 == 0))
      CHECK(w.codes.numel() * 32 == c.out * c.in * c.bits);
  }
}

TEST_CASE("the CPU kernel computes the reference's x W^T", "[low_bit]") {
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const Quantized q = random_quantized(c, 200 + i);
    const ops::LowBitWeight w = pack(c, q);
    for (int64_t rows : {1, 2, 3, 8, 9, 16, 17, 64, 70}) {
      INFO(describe(c) << ", " << rows << " rows");
      const at::Tensor x = at::randn({rows, c.in}, generator(300 + i * 100 + rows), at::kFloat);
      const at::Tensor want = ops::low_bit_matmul_ref(x, w);
      // Float32 sums of `in` terms in another order: relative to the sum of |terms|.
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w).abs().t()).clamp_min(1e-3);
      const at::Tensor kernel = ops::low_bit_matmul_cpu_kernel(x, w);
      CHECK(((kernel - want).abs() / magnitude).max().item<double>() < 1e-5);
      // The dispatcher: the kernel up to kLowBitKernelRows rows, the dense path beyond.
      const at::Tensor dispatched = ops::low_bit_matmul(x, w);
      CHECK(((dispatched - want).abs() / magnitude).max().item<double>() < 1e-5);
    }
  }
}

TEST_CASE("the CPU kernel takes bf16 inputs and any leading shape", "[low_bit]") {
  const Case c{4, 48, 256, 128, true, false};
  const Quantized q = random_quantized(c, 7);
  const ops::LowBitWeight w = pack(c, q);
  const at::Tensor x = at::randn({2, 3, c.in}, generator(8), at::kFloat).to(at::kBFloat16);
  const at::Tensor got = ops::low_bit_matmul_cpu_kernel(x, w);  // the kernel in any --kernels mode
  REQUIRE(got.sizes() == at::IntArrayRef{2, 3, c.out});
  CHECK(got.scalar_type() == at::kBFloat16);
  // The kernel accumulates the bf16 inputs in float32; the output is rounded to bf16 once.
  const at::Tensor want = ops::low_bit_matmul_ref(x.to(at::kFloat), w);
  CHECK(at::allclose(got.to(at::kFloat), want, /*rtol=*/1e-2, /*atol=*/1e-2));
}

TEST_CASE("low-bit packing refuses what the kernels cannot read", "[low_bit]") {
  const at::Tensor codes = at::zeros({4, 32}, at::kInt);
  const at::Tensor scales = at::ones({4, 1}), zeros = at::zeros({4, 1});
  test::require_error([&] { ops::pack_low_bit(codes, scales, zeros, 5, 32, {}, "l"); },
                      {"l", "5-bit"});
  test::require_error([&] { ops::pack_low_bit(codes + 4, scales, zeros, 2, 32, {}, "l"); },
                      {"l", "codes outside [0, 3]"});
  test::require_error([&] { ops::pack_low_bit(codes, at::ones({4, 2}), zeros, 4, 32, {}, "l"); },
                      {"l", "scales and zeros"});
  const ops::LowBitWeight w = ops::pack_low_bit(codes, scales, zeros, 4, 32, {}, "l");
  test::require_error([&] { ops::low_bit_matmul(at::ones({1, 31}), w); }, {"in_features = 32"});
}
