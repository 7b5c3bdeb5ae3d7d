// Packed low-bit weights (ops/low_bit_weight.h) and their CPU kernel (ops/low_bit_matmul.h)
// against closed forms and the plain reference: the packing round-trips every code exactly, the
// dequantized weight is exactly (code - zero) * scale in the inputs' own order, and the kernel's
// y = x W^T agrees with the reference (dequantize, then a float32 matmul) within float32
// summation-order tolerance, on awkward shapes: in-features not a multiple of the group or of 32,
// 3-bit codes, per-channel groups, act-order column permutations, 1 to 70 rows, bf16 inputs.
// The int8 kernel (ops/low_bit_matmul_int8_kernel.h) against its plain reference within float32
// noise, and against the float reference within the closed-form bound of rounding x to 8 bits.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ops/cpu_target.h"
#include "ops/kernel_choice.h"
#include "ops/low_bit_matmul.h"
#include "ops/low_bit_matmul_int8_kernel.h"
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
      {4, 40, 128, 32, false, false}, {4, 33, 200, 64, true, false},   // partial last group
      {2, 17, 96, 32, false, true},   {2, 24, 130, 128, true, false},  // 2 groups, second 2 wide
      {3, 31, 160, 32, true, false},  {3, 8, 100, -1, false, true},    // per channel, 100 % 32
      {3, 19, 75, 64, false, false},  {8, 12, 64, 32, true, false},
      {8, 9, 33, -1, false, false},   {4, 5, 7, -1, true, true},  // fewer columns than a block
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

namespace {

// The CPU targets this machine runs (ops/cpu_target.h), each forced in turn by the tests below.
std::vector<ops::CpuTarget> supported_targets() {
  std::vector<ops::CpuTarget> out;
  for (int t = 0; t < static_cast<int>(ops::CpuTarget::kCount); ++t)
    if (ops::cpu_target_supported(static_cast<ops::CpuTarget>(t)))
      out.push_back(static_cast<ops::CpuTarget>(t));
  return out;
}

struct ForcedTarget {
  explicit ForcedTarget(ops::CpuTarget target) { ops::set_cpu_target(target); }
  ~ForcedTarget() { ops::set_cpu_target(std::nullopt); }
};

}  // namespace

TEST_CASE("the CPU kernel computes the reference's x W^T on every CPU target", "[low_bit]") {
  const auto targets = supported_targets();
  std::cout << "CPU targets here: " << ops::cpu_target_description() << "\n";
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const Quantized q = random_quantized(c, 200 + i);
    const ops::LowBitWeight w = pack(c, q);
    for (int64_t rows : {1, 2, 3, 8, 9, 16, 17, 64, 70}) {
      const at::Tensor x = at::randn({rows, c.in}, generator(300 + i * 100 + rows), at::kFloat);
      const at::Tensor want = ops::low_bit_matmul_ref(x, w);
      // Float32 sums of `in` terms in another order: relative to the sum of |terms|.
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w).abs().t()).clamp_min(1e-3);
      for (const auto target : targets) {
        INFO(describe(c) << ", " << rows << " rows, target " << enum_name(target));
        ForcedTarget forced(target);
        const at::Tensor kernel = ops::low_bit_matmul_cpu_kernel(x, w);
        CHECK(((kernel - want).abs() / magnitude).max().item<double>() < 1e-5);
        // The many-row path at every row count, and the dispatcher (the kernel up to
        // low_bit_gemm_rows() rows, the GEMM path beyond).
        const at::Tensor gemm = ops::low_bit_matmul_cpu_gemm(x, w);
        CHECK(((gemm - want).abs() / magnitude).max().item<double>() < 1e-5);
        const at::Tensor dispatched = ops::low_bit_matmul(x, w);
        CHECK(((dispatched - want).abs() / magnitude).max().item<double>() < 1e-5);
      }
      // A one-hot x picks one weight: every target's decode gives the reference's weight exactly.
      const at::Tensor dense = ops::dequantize_low_bit(w);
      for (const auto target : targets) {
        INFO(describe(c) << ", target " << enum_name(target) << ": one-hot rows");
        ForcedTarget forced(target);
        const int64_t picks = std::min<int64_t>(rows, c.in);
        at::Tensor one_hot = at::zeros({picks, c.in}, at::kFloat);
        const at::Tensor columns =
            at::randperm(c.in, generator(700 + i), at::kLong).narrow(0, 0, picks);
        for (int64_t r = 0; r < picks; ++r) one_hot[r][columns[r].item<int64_t>()] = 1.0f;
        const at::Tensor picked = dense.index_select(1, columns).t().contiguous();
        CHECK(at::equal(ops::low_bit_matmul_cpu_kernel(one_hot, w), picked));
        CHECK(at::equal(ops::low_bit_matmul_cpu_gemm(one_hot, w), picked));
      }
    }
  }
}

TEST_CASE("the float kernel reads exact float16 scales and zeros with the same results",
          "[low_bit]") {
  // Scales float16 holds exactly (as a GPTQ checkpoint's): the kernel reads the float16 copies
  // (ops/low_bit_weight.h); a copy of the weight without them reads the float32 ones.
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    Quantized q = random_quantized(c, 900 + i);
    q.scales = q.scales.to(at::kHalf).to(at::kFloat);
    const ops::LowBitWeight w = pack(c, q);
    REQUIRE(ops::exact_half_scales(w) != nullptr);
    ops::LowBitWeight float_only = w;
    float_only.half_scales = nullptr;
    REQUIRE(ops::exact_half_scales(float_only) == nullptr);
    for (int64_t rows : {1, 5, 9}) {
      const at::Tensor x = at::randn({rows, c.in}, generator(950 + i * 10 + rows), at::kFloat);
      for (const auto target : supported_targets()) {
        INFO(describe(c) << ", " << rows << " rows, target " << enum_name(target));
        ForcedTarget forced(target);
        CHECK(at::equal(ops::low_bit_matmul_cpu_kernel(x, w),
                        ops::low_bit_matmul_cpu_kernel(x, float_only)));
      }
    }
  }
}

TEST_CASE("a symmetric weight's kernels read its one zero with the same results", "[low_bit]") {
  // Every zero 2^(bits-1), as symmetric GPTQ checkpoints hold them: the AVX2 codes read zeros[0]
  // (LowBitKernelArgs::zeros_shared) instead of a zero per group. A copy without half_scales has
  // no such hint and reads them all: bit for bit the same y on every target, float and int8.
  for (size_t i = 0; i < cases().size(); ++i) {
    Case c = cases()[i];
    c.symmetric = true;
    INFO(describe(c));
    Quantized q = random_quantized(c, 1100 + i);
    q.scales = q.scales.to(at::kHalf).to(at::kFloat);
    const ops::LowBitWeight w = pack(c, q);
    ops::LowBitWeight per_group = w;
    per_group.half_scales = nullptr;
    CHECK(ops::low_bit_zeros_shared(w));
    CHECK(!ops::low_bit_zeros_shared(per_group));
    // One zero off, in the last row's last group: no longer shared, and the kernels must see it.
    Quantized uneven = q;
    uneven.zeros = q.zeros.clone();
    uneven.zeros[c.out - 1][uneven.zeros.size(1) - 1] = 1;
    const ops::LowBitWeight w_uneven = pack(c, uneven);
    CHECK(!ops::low_bit_zeros_shared(w_uneven));
    for (int64_t rows : {1, 3, 9}) {
      const at::Tensor x = at::randn({rows, c.in}, generator(1200 + i * 10 + rows), at::kFloat);
      const at::Tensor want_uneven = ops::low_bit_matmul_ref(x, w_uneven);
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w_uneven).abs().t()).clamp_min(1e-3);
      const at::Tensor padded = ops::in_kernel_order(x, w).contiguous();
      for (const auto target : supported_targets()) {
        INFO(rows << " rows, target " << enum_name(target));
        ForcedTarget forced(target);
        CHECK(at::equal(ops::low_bit_matmul_cpu_kernel(x, w),
                        ops::low_bit_matmul_cpu_kernel(x, per_group)));
        const at::Tensor uneven_y = ops::low_bit_matmul_cpu_kernel(x, w_uneven);
        CHECK(((uneven_y - want_uneven).abs() / magnitude).max().item<double>() < 1e-5);
        if (c.bits <= 4 && c.in % 32 == 0 && (c.group < 0 || c.group % 32 == 0))
          CHECK(at::equal(ops::low_bit_matmul_int8(padded, w),
                          ops::low_bit_matmul_int8(padded, per_group)));
      }
    }
  }
}

TEST_CASE("activations of every magnitude stay within the bound on every target", "[low_bit]") {
  // The AVX2 4-bit code divides x by up to 2^20 (ops/low_bit_matmul_avx2_kernel.h): columns of
  // 1e-33 become subnormal there, columns of 1e30 stay finite. Mixed in one row with ordinary
  // values, the result must stay within the float kernels' bound of the reference.
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const ops::LowBitWeight w = pack(c, random_quantized(c, 1000 + i));
    for (const double extreme : {1e-33, 1e-40, 1e30}) {
      at::Tensor x = at::randn({3, c.in}, generator(1100 + i), at::kFloat);
      const at::Tensor picked = at::rand({c.in}, generator(1200 + i)) < 0.5;
      x = at::where(picked, x * extreme, x);
      const at::Tensor want = ops::low_bit_matmul_ref(x, w);
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w).abs().t()).clamp_min(1e-30);
      for (const auto target : supported_targets()) {
        INFO(describe(c) << ", columns times " << extreme << ", target " << enum_name(target));
        ForcedTarget forced(target);
        const at::Tensor got = ops::low_bit_matmul_cpu_kernel(x, w);
        REQUIRE(at::isfinite(got).all().item<bool>());
        CHECK(((got - want).abs() / magnitude).max().item<double>() < 1e-5);
      }
    }
  }
}

TEST_CASE("the GEMM path's weight tiles cover every output row", "[low_bit]") {
  // 4,100 inputs in groups of 128: 33 groups, 4,224 floats a dequantized row, so a tile holds 15
  // rows and 37 outputs take three tiles (15, 15, 7); act-order, a partial last group.
  const Case c{4, 37, 4100, 128, true, false};
  const Quantized q = random_quantized(c, 900);
  const ops::LowBitWeight w = pack(c, q);
  REQUIRE(ops::kLowBitGemmTileFloats / (33 * 128) == 15);
  for (const auto target : supported_targets()) {
    ForcedTarget forced(target);
    for (int64_t rows : {1, 20, 33}) {
      INFO("target " << enum_name(target) << ", " << rows << " rows");
      const at::Tensor x = at::randn({rows, c.in}, generator(901 + rows), at::kFloat);
      const at::Tensor want = ops::low_bit_matmul_ref(x, w);
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w).abs().t()).clamp_min(1e-3);
      CHECK(((ops::low_bit_matmul_cpu_gemm(x, w) - want).abs() / magnitude).max().item<double>() <
            1e-5);
    }
  }
}

TEST_CASE("a CPU target is forced, reported and released", "[low_bit]") {
  const auto best = ops::best_cpu_target();
  CHECK(ops::cpu_target_supported(best));
  CHECK(ops::cpu_target_supported(ops::CpuTarget::kBaseline));
  {
    ForcedTarget forced(ops::CpuTarget::kBaseline);
    CHECK(ops::cpu_target() == ops::CpuTarget::kBaseline);
    CHECK(ops::cpu_target_description().starts_with("baseline (supported: "));
  }
  if (std::getenv("RQAT_CPU_TARGET") == nullptr) CHECK(ops::cpu_target() == best);
  for (int t = 0; t < static_cast<int>(ops::CpuTarget::kCount); ++t) {
    const auto target = static_cast<ops::CpuTarget>(t);
    if (ops::cpu_target_supported(target)) continue;
    INFO(enum_name(target) << " is not supported here: forcing it fails and names it");
    CHECK_THROWS_WITH(ops::set_cpu_target(target),
                      Catch::Contains(std::string("cannot run ") + std::string(enum_name(target))));
  }
}

TEST_CASE("the dispatcher hands over to the GEMM tiles where each CPU target's kernel slows",
          "[low_bit]") {
  // The bounds measured in docs/performance.md: float activations 64 / 32 / 16 rows on avx512 /
  // avx2 / baseline; int8 activations 64 where the int8 kernel's AVX2 code runs, the float bound
  // on the baseline (the same 4-lane kernel). At a bound low_bit_matmul is the kernel's result bit
  // for bit, one row over it the GEMM path's.
  const Case c{4, 24, 128, 32, false, false};
  const ops::LowBitWeight w = pack(c, random_quantized(c, 77));
  struct Bounds {
    ops::CpuTarget target;
    int64_t float_rows, int8_rows;
  };
  for (const Bounds& b :
       {Bounds{ops::CpuTarget::kAvx512, 64, 64}, Bounds{ops::CpuTarget::kAvx2, 32, 64},
        Bounds{ops::CpuTarget::kBaseline, 16, 16}}) {
    if (!ops::cpu_target_supported(b.target)) continue;
    INFO(enum_name(b.target));
    ForcedTarget forced(b.target);
    CHECK(ops::low_bit_gemm_rows() == b.float_rows);
    CHECK(ops::low_bit_int8_rows() == b.int8_rows);
    if (ops::kernel_mode() == ops::KernelMode::kReference) continue;  // the twin takes every call
    auto gen = generator(78);
    for (int64_t extra : {0, 1}) {
      const at::Tensor x = at::randn({b.float_rows + extra, c.in}, gen, at::kFloat);
      CHECK(at::equal(ops::low_bit_matmul(x, w), extra == 0 ? ops::low_bit_matmul_cpu_kernel(x, w)
                                                            : ops::low_bit_matmul_cpu_gemm(x, w)));
      const at::Tensor x8 = at::randn({b.int8_rows + extra, c.in}, gen, at::kFloat);
      ops::set_low_bit_activations(ops::LowBitActivations::kInt8);
      const at::Tensor got = ops::low_bit_matmul(x8, w);
      ops::set_low_bit_activations(ops::LowBitActivations::kFloat);
      CHECK(at::equal(got, extra == 0 ? ops::low_bit_matmul_cpu_int8_kernel(x8, w)
                                      : ops::low_bit_matmul_cpu_gemm(x8, w)));
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
  test::require_error(
      [&] {
        ops::pack_low_bit(codes, at::ones({4, 2}), zeros, 4, 32, {}, "l");
      },
      {"l", "scales and zeros"});
  const ops::LowBitWeight w = ops::pack_low_bit(codes, scales, zeros, 4, 32, {}, "l");
  test::require_error([&] { ops::low_bit_matmul(at::ones({1, 31}), w); }, {"in_features = 32"});
}

TEST_CASE("the int8 kernel computes its reference, within the bound of rounding x", "[low_bit]") {
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    if (c.bits > 4) continue;  // 8-bit codes take float activations only
    const Quantized q = random_quantized(c, 400 + i);
    const ops::LowBitWeight w = pack(c, q);
    for (int64_t rows : {1, 2, 3, 4, 5, 9}) {
      INFO(describe(c) << ", " << rows << " rows");
      // Fresh inputs with a few outliers, as activations have: blocks of very different d_b.
      auto gen = generator(500 + i * 100 + rows);
      const at::Tensor x = at::randn({rows, c.in}, gen, at::kFloat) *
                           (1 + 20 * (at::rand({rows, c.in}, gen) > 0.97).to(at::kFloat));
      const at::Tensor got = ops::low_bit_matmul_cpu_int8_kernel(x, w);
      const at::Tensor padded = ops::in_kernel_order(x, w);
      const int64_t width = w.groups() * w.blocks_per_group() * 32;
      // The kernel's input layout: each group padded to whole blocks (as low_bit_matmul does).
      at::Tensor blocks = at::zeros({rows, width}, at::kFloat);
      for (int64_t g = 0; g < w.groups(); ++g) {
        const int64_t first = g * w.group_size, n = std::min(w.group_size, c.in - first);
        blocks.narrow(1, g * w.blocks_per_group() * 32, n).copy_(padded.narrow(1, first, n));
      }
      // Its reference (integer sums in int64, the rest in float64): float32 noise only.
      const at::Tensor reference = ops::low_bit_matmul_int8_reference(blocks, w);
      const at::Tensor magnitude =
          at::matmul(x.abs(), ops::dequantize_low_bit(w).abs().t()).clamp_min(1e-3);
      CHECK(((got - reference).abs() / magnitude).max().item<double>() < 1e-5);
      // The loop of CPUs without AVX2: the same integer sums.
      const at::Tensor portable = ops::low_bit_matmul_int8(blocks, w, true, /*portable=*/true);
      CHECK(((portable - reference).abs() / magnitude).max().item<double>() < 1e-5);
      // The float result, within what rounding x to 8 bits can change (a closed form) ...
      const at::Tensor exact =
          at::matmul(x.to(at::kDouble), ops::dequantize_low_bit(w).to(at::kDouble).t());
      const at::Tensor bound = ops::low_bit_int8_error_bound(blocks, w).to(at::kDouble);
      CHECK(((got - exact).abs() - bound - 1e-5 * magnitude).max().item<double>() <= 0);
      // ... and the rounding does change it (the kernel is not the float path).
      CHECK(((got - exact).abs() / magnitude).max().item<double>() > 1e-5);
      // The dispatcher takes the int8 kernel when asked to.
      ops::set_low_bit_activations(ops::LowBitActivations::kInt8);
      const at::Tensor dispatched = ops::low_bit_matmul(x, w);
      ops::set_low_bit_activations(ops::LowBitActivations::kFloat);
      if (ops::kernel_mode() != ops::KernelMode::kReference) CHECK(at::equal(dispatched, got));
    }
  }
}

TEST_CASE("the int8 kernel rounds each block of x to 8 bits with max |x| / 127", "[low_bit]") {
  // One block, codes all 1 and zero 0, scale 1: y is the sum of the rounded x, in closed form.
  const int64_t in = 32;
  for (int bits : {2, 3, 4}) {
    INFO("W" << bits);
    const at::Tensor codes = at::ones({1, in}, at::kInt);
    const ops::LowBitWeight w = ops::pack_low_bit(codes, at::ones({1, 1}), at::zeros({1, 1}), bits,
                                                  32, at::Tensor(), "test");
    const at::Tensor x = at::linspace(-2.0, 1.0, in, at::kFloat).view({1, in});
    const double d = 2.0 / 127;
    const double want = (at::round(x.to(at::kDouble) / d) * d).sum().item<double>();
    const double got = ops::low_bit_matmul_cpu_int8_kernel(x, w).item<double>();
    CHECK(std::abs(got - want) < 1e-5);
    // A block of zeros, and a NaN that reaches y.
    CHECK(ops::low_bit_matmul_cpu_int8_kernel(at::zeros({1, in}), w).item<float>() == 0);
    at::Tensor poisoned = x.clone();
    poisoned[0][5] = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(ops::low_bit_matmul_cpu_int8_kernel(poisoned, w).item<float>()));
  }
}

TEST_CASE("the int8 kernel reaches every code of every position", "[low_bit]") {
  // A one-hot x picks one column; its output is exactly (code - zero) * scale * x, for all codes.
  for (int bits : {2, 3, 4}) {
    INFO("W" << bits);
    const int64_t levels = int64_t{1} << bits, in = 64;
    const at::Tensor codes = at::arange(levels * in, at::kInt).remainder(levels).view({levels, in});
    const ops::LowBitWeight w =
        ops::pack_low_bit(codes, at::full({levels, 2}, 0.5), at::full({levels, 2}, 1.0), bits, 32,
                          at::Tensor(), "test");
    const at::Tensor x = at::eye(in, at::kFloat) * 127;  // 64 rows, each one column: d = 1
    const at::Tensor got = ops::low_bit_matmul_cpu_int8_kernel(x, w);
    const at::Tensor want = (codes.t().to(at::kFloat) - 1) * 0.5 * 127;
    CHECK(at::equal(got, want));
    CHECK(at::equal(ops::low_bit_matmul_int8(x, w, true, /*portable=*/true), want));
  }
}

TEST_CASE("the int8 kernel reads exact float16 scales and zeros with the same results",
          "[low_bit]") {
  for (int bits : {2, 3, 4}) {
    INFO("W" << bits);
    const int64_t out = 37, in = 320, group = 32, levels = int64_t{1} << bits;
    auto gen = generator(900 + bits);
    const at::Tensor codes = at::randint(0, levels, {out, in}, gen, at::kInt);
    // float16 scales and integer zeros, as a GPTQ checkpoint stores them: float16 is exact.
    const at::Tensor scales =
        (at::rand({out, in / group}, gen) * 0.1 + 0.01).to(at::kHalf).to(at::kFloat);
    const at::Tensor zeros = at::randint(0, levels, {out, in / group}, gen, at::kFloat);
    const ops::LowBitWeight w =
        ops::pack_low_bit(codes, scales, zeros, bits, group, at::Tensor(), "test");
    const at::Tensor x = at::randn({3, in}, gen, at::kFloat);
    const at::Tensor half = ops::low_bit_matmul_int8(x, w);
    REQUIRE(w.half_scales->scales.defined());  // made at the first call
    CHECK(w.bytes() == w.codes.numel() * 4 + out * (in / group) * (4 + 4 + 2 + 2));
    CHECK(at::equal(half, ops::low_bit_matmul_int8(x, w, /*use_half_scales=*/false)));
    // Scales that float16 does not hold: no copies, the float32 ones.
    const ops::LowBitWeight inexact =
        ops::pack_low_bit(codes, scales + 1e-6, zeros, bits, group, at::Tensor(), "test");
    ops::low_bit_matmul_int8(x, inexact);
    CHECK(!inexact.half_scales->scales.defined());
  }
}
