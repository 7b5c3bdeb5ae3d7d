// Group-wise fake quantization on the CPU: the ATen path equals the plain reference bit for bit on
// seeded random inputs with awkward shapes (NaN and infinities included), matches a hand-computed
// case, and rejects bad shapes. The fused frozen-scale STE kernels (ops/fake_quant_ste.h) equal
// the ATen composite they replace and a plain per-element loop bit for bit, forward and backward,
// with act-order g_idx and weights placed exactly at rounding ties and at the edges of the range.
// Dynamic per-tensor activation quantization equals its plain loop and both of its gradients
// their closed forms.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "ops/dynamic_fake_quant.h"
#include "ops/fake_quant.h"
#include "ops/fake_quant_ste.h"
#include "test_util.h"

using rqat::ops::fake_quantize_groupwise;
using rqat::ops::fake_quantize_groupwise_ref;

namespace {

// Asymmetric min-max scales and zeros per group, as RTN computes them (scale > 0 always).
std::pair<at::Tensor, at::Tensor> minmax_params(const at::Tensor& w, int bits, int64_t group) {
  const int64_t rows = w.size(0), groups = w.size(1) / group;
  auto g = w.to(at::kFloat).view({rows, groups, group});
  auto lo = g.amin(-1).clamp_max(0), hi = g.amax(-1).clamp_min(0);
  auto scale = ((hi - lo) / ((1 << bits) - 1)).clamp_min(1e-8);
  auto zero = at::round(-lo / scale);
  return {scale, zero};
}

}  // namespace

TEST_CASE("fake quant: ATen path equals the reference bit for bit") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 32, 32}, {7, 96, 32}, {5, 128, 64}, {3, 256, 128},
                          {4, 40, -1}, {1, 1, 1},   {9, 33, 11}};
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (auto dtype : {at::kFloat, at::kBFloat16}) {
        INFO("rows " << s.rows << " cols " << s.cols << " group " << s.group << " bits " << bits
                     << " " << dtype);
        auto w = (at::randn({s.rows, s.cols}, gen) * 0.05).to(dtype);
        const int64_t group = s.group <= 0 ? s.cols : s.group;
        auto [scale, zero] = minmax_params(w, bits, group);
        auto fast = fake_quantize_groupwise(w, scale, zero, bits, s.group);
        auto ref = fake_quantize_groupwise_ref(w, scale, zero, bits, s.group);
        CHECK(fast.scalar_type() == dtype);
        CHECK(at::equal(fast, ref));
        // Every output is on the grid: (q - zero) * scale for an integer q in range.
        auto q = at::round(fast.to(at::kFloat).view({s.rows, -1, group}) / scale.unsqueeze(-1) +
                           zero.unsqueeze(-1));
        CHECK(q.min().item<float>() >= 0);
        CHECK(q.max().item<float>() <= (1 << bits) - 1);
      }
    }
  }
}

TEST_CASE("fake quant: a hand-computed 2-bit example") {
  // scale 0.5, zero 1: codes 0..3 represent -0.5, 0, 0.5, 1.0; ties round to even codes.
  auto w = at::tensor({-2.0f, -0.5f, -0.2f, 0.25f, 0.74f, 0.75f, 1.3f, 9.0f}).view({1, 8});
  auto scale = at::full({1, 2}, 0.5f), zero = at::full({1, 2}, 1.0f);
  auto expected = at::tensor({-0.5f, -0.5f, 0.0f, 0.0f, 0.5f, 1.0f, 1.0f, 1.0f}).view({1, 8});
  CHECK(at::equal(fake_quantize_groupwise(w, scale, zero, 2, 4), expected));
  CHECK(at::equal(fake_quantize_groupwise_ref(w, scale, zero, 2, 4), expected));
}

TEST_CASE("fake quant: 8-bit error is within half a step") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  auto w = at::randn({16, 128}, gen);
  auto [scale, zero] = minmax_params(w, 8, 32);
  auto err = (fake_quantize_groupwise(w, scale, zero, 8, 32) - w).abs().view({16, 4, 32});
  CHECK((err <= scale.unsqueeze(-1) * 0.5 + 1e-6).all().item<bool>());
}

TEST_CASE("fake quant: bad shapes are one-line errors") {
  auto w = at::randn({4, 64});
  auto s = at::ones({4, 2}), z = at::zeros({4, 2});
  rqat::test::require_error([&] { fake_quantize_groupwise(w, s, z, 4, 48); }, {"group_size 48"});
  rqat::test::require_error(
      [&] {
        fake_quantize_groupwise(w, at::ones({4, 3}), z, 4, 32);
      },
      {"scales and zeros"});
  rqat::test::require_error([&] { fake_quantize_groupwise(w, s, z, 9, 32); }, {"bits = 9"});
  rqat::test::require_error(
      [&] {
        fake_quantize_groupwise(w.view({4, 8, 8}), s, z, 4, 32);
      },
      {"2-D"});
  rqat::test::require_error([&] { fake_quantize_groupwise(w.to(at::kDouble), s, z, 4, 32); },
                            {"dtype"});
}

TEST_CASE("fake quant: NaN and infinities take the same path in the ATen code and the reference") {
  const float inf = std::numeric_limits<float>::infinity();
  auto w = at::tensor({std::nanf(""), inf, -inf, 0.3f, -0.0f, 1e30f, -1e30f, 0.01f}).view({2, 4});
  auto scale = at::full({2, 1}, 0.05f), zero = at::full({2, 1}, 2.0f);
  auto fast = fake_quantize_groupwise(w, scale, zero, 3, 4);
  auto ref = fake_quantize_groupwise_ref(w, scale, zero, 3, 4);
  CHECK(std::isnan(fast[0][0].item<float>()));
  CHECK(at::equal(fast.view(at::kInt), ref.view(at::kInt)));
}

namespace {

using rqat::ops::fake_quantize_ste_backward;
using rqat::ops::fake_quantize_ste_backward_ref;
using rqat::ops::fake_quantize_ste_forward;
using rqat::ops::fake_quantize_ste_forward_ref;

struct SteProblem {
  at::Tensor w, scales, zeros, g_idx, grad;
  int64_t max_code = 0;
};

// A weight with many hard elements. Even rows get power-of-two scales, so that w = (m + 1/2 - z) s
// makes w / s an exact tie; odd rows get arbitrary scales (near ties). About 15% of the weights are
// such ties with codes m + 1/2 around both ends of the range (m in -2..1 and maxq-1..maxq+1), 10%
// sit exactly on codes -1, 0, maxq, maxq + 1, 3% are special (+-0, +-inf, NaN, +-1e30), 2% have
// w / s near 2^22 and 2^23; the rest are random and wide enough that some clamp. fractional_zeros:
// zero points that are not integers (LSQ's continuous parameter; the kernels must not assume
// integral ones).
SteProblem hard_problem(int64_t rows, int64_t cols, int64_t group, int bits, bool act_order,
                        bool fractional_zeros, at::Generator& gen) {
  SteProblem p;
  p.max_code = (int64_t{1} << bits) - 1;
  const int64_t g = group <= 0 ? cols : group;
  const int64_t groups = (cols + g - 1) / g;
  auto columns = act_order ? at::randperm(cols, gen, at::kLong) : at::arange(cols, at::kLong);
  p.g_idx = at::floor_divide(columns, g).to(at::kInt);
  auto exponent = at::randint(4, 10, {rows, groups}, gen).to(at::kFloat);
  auto arbitrary = at::rand({rows, groups}, gen) * 0.05 + 0.005;
  auto even_row = (at::arange(rows) % 2 == 0).unsqueeze(1);
  p.scales = at::where(even_row, at::pow(2.0, -exponent), arbitrary).contiguous();
  p.zeros = at::randint(0, p.max_code + 1, {rows, groups}, gen).to(at::kFloat);
  if (fractional_zeros) p.zeros = p.zeros + at::rand({rows, groups}, gen) - 0.5;
  p.w = at::randn({rows, cols}, gen) * 0.1;
  p.grad = at::randn({rows, cols}, gen);
  auto u = at::rand({rows, cols}, gen);
  auto pick = at::randint(0, 1 << 20, {rows, cols}, gen).to(at::kInt);
  auto W = p.w.accessor<float, 2>();
  auto U = u.accessor<float, 2>();
  auto P = pick.accessor<int32_t, 2>();
  auto S = p.scales.accessor<float, 2>();
  auto Z = p.zeros.accessor<float, 2>();
  auto G = p.g_idx.accessor<int32_t, 1>();
  const float maxq = static_cast<float>(p.max_code);
  const float ties[] = {-2, -1, 0, 1, maxq - 1, maxq, maxq + 1};
  const float edges[] = {-1, 0, maxq, maxq + 1};
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, inf, -inf, std::nanf(""), 1e30f, -1e30f};
  // w / s where rounding by adding 2^23 reaches its limits (ties with a spacing of 1/2).
  const float huge[] = {8388607.5f, -8388607.5f, 8388606.5f, 4194304.5f, 8388608.0f, 16777216.0f};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float s = S[r][G[c]], z = Z[r][G[c]];
      if (U[r][c] < 0.15f)
        W[r][c] = (ties[P[r][c] % 7] + 0.5f - z) * s;
      else if (U[r][c] < 0.25f)
        W[r][c] = (edges[P[r][c] % 4] - z) * s;
      else if (U[r][c] < 0.28f)
        W[r][c] = specials[P[r][c] % 7];
      else if (U[r][c] < 0.30f)
        W[r][c] = huge[P[r][c] % 6] * s;
    }
  }
  return p;
}

// The rule of ops/fake_quant_ste.h written per element with std::nearbyint: w_q and the in-range
// indicator.
std::pair<at::Tensor, at::Tensor> plain_loop_ste(const SteProblem& p) {
  auto wq = at::empty_like(p.w), inside = at::empty_like(p.w, at::kBool);
  auto W = p.w.accessor<float, 2>();
  auto S = p.scales.accessor<float, 2>();
  auto Z = p.zeros.accessor<float, 2>();
  auto G = p.g_idx.accessor<int32_t, 1>();
  auto Q = wq.accessor<float, 2>();
  auto I = inside.accessor<bool, 2>();
  const float maxq = static_cast<float>(p.max_code);
  for (int64_t r = 0; r < p.w.size(0); ++r) {
    for (int64_t c = 0; c < p.w.size(1); ++c) {
      const float s = S[r][G[c]], z = Z[r][G[c]];
      const float code = std::nearbyint(W[r][c] / s) + z;
      const float q = code < 0 ? 0.0f : (code > maxq ? maxq : code);  // NaN stays NaN
      Q[r][c] = (q - z) * s;
      I[r][c] = !(code < 0 || code > maxq);  // a NaN code counts as inside, as in the ATen path
    }
  }
  return {wq, inside};
}

// Bit patterns, so that NaN == NaN and -0 != +0.
void require_same_bits(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.scalar_type() == at::kFloat);
  REQUIRE(b.scalar_type() == at::kFloat);
  auto differ = a.contiguous().view(at::kInt) != b.contiguous().view(at::kInt);
  INFO(differ.sum().item<int64_t>() << " of " << a.numel() << " elements differ");
  REQUIRE_FALSE(differ.any().item<bool>());
}

}  // namespace

TEST_CASE(
    "fake quant ste: fused CPU kernels equal the ATen composite and a plain loop bit for bit") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 1, 1},    {3, 7, 2},    {6, 36, 8},  {9, 33, 11},
                          {8, 128, 64}, {5, 100, 64}, {4, 40, -1}, {64, 256, 32}};
  int64_t ties = 0, clamped = 0, nans = 0;
  for (const auto& sh : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (bool act_order : {false, true}) {
        for (bool fractional : {false, true}) {
          INFO("rows " << sh.rows << " cols " << sh.cols << " group " << sh.group << " bits "
                       << bits << " act-order " << act_order << " fractional zeros " << fractional);
          const SteProblem p =
              hard_problem(sh.rows, sh.cols, sh.group, bits, act_order, fractional, gen);
          auto fused = fake_quantize_ste_forward(p.w, p.scales, p.zeros, p.g_idx, p.max_code);
          auto ref = fake_quantize_ste_forward_ref(p.w, p.scales, p.zeros, p.g_idx, p.max_code);
          auto [loop_wq, inside] = plain_loop_ste(p);
          require_same_bits(fused, ref);
          require_same_bits(fused, loop_wq);

          auto grad =
              fake_quantize_ste_backward(p.grad, p.w, p.scales, p.zeros, p.g_idx, p.max_code);
          auto grad_ref =
              fake_quantize_ste_backward_ref(p.grad, p.w, p.scales, p.zeros, p.g_idx, p.max_code);
          require_same_bits(grad, grad_ref);
          require_same_bits(grad, at::where(inside, p.grad, at::zeros_like(p.grad)));

          // int64 g_idx gives the same.
          require_same_bits(
              fake_quantize_ste_forward(p.w, p.scales, p.zeros, p.g_idx.to(at::kLong), p.max_code),
              fused);

          auto index = p.g_idx.to(at::kLong);
          auto v = p.w / p.scales.index_select(1, index);
          ties += (v - at::floor(v) == 0.5).sum().item<int64_t>();
          clamped += inside.logical_not().sum().item<int64_t>();
          nans += at::isnan(fused).sum().item<int64_t>();
        }
      }
    }
  }
  // The hard cases were really exercised.
  INFO("exact ties " << ties << ", clamped " << clamped << ", NaN outputs " << nans);
  CHECK(ties > 1000);
  CHECK(clamped > 1000);
  CHECK(nans > 20);
}

TEST_CASE("fake quant ste: a hand-computed 2-bit example with ties and range edges") {
  // scale 0.25, zero 1: codes 0..3 stand for -0.25, 0, 0.25, 0.5. w / s is
  //   -2.5 and -1.5: both round to -2 (ties to even), code -1: clamped, no gradient
  //   -1: code 0, the bottom edge, inside;  -0.5: rounds to -0, code 1, inside
  //   1.5 and 2.5: both round to 2, code 3, the top edge, inside
  //   3: code 4, clamped;  3.5: rounds to 4, code 5, clamped
  auto w = at::tensor({-0.625f, -0.375f, -0.25f, -0.125f, 0.375f, 0.625f, 0.75f, 0.875f});
  w = w.view({1, 8});
  auto scale = at::full({1, 1}, 0.25f), zero = at::full({1, 1}, 1.0f);
  auto g_idx = at::zeros({8}, at::kInt);
  auto expected = at::tensor({-0.25f, -0.25f, -0.25f, 0.0f, 0.5f, 0.5f, 0.5f, 0.5f}).view({1, 8});
  CHECK(at::equal(fake_quantize_ste_forward(w, scale, zero, g_idx, 3), expected));
  auto grad = at::arange(1, 9, at::kFloat).view({1, 8});
  auto expected_grad = at::tensor({0.f, 0.f, 3.f, 4.f, 5.f, 6.f, 0.f, 0.f}).view({1, 8});
  CHECK(at::equal(fake_quantize_ste_backward(grad, w, scale, zero, g_idx, 3), expected_grad));
}

TEST_CASE("fake quant ste: bad arguments are one-line errors") {
  auto w = at::randn({4, 8});
  auto s = at::full({4, 2}, 0.1f), z = at::ones({4, 2});
  auto g_idx = at::tensor({0, 0, 1, 1, 0, 1, 0, 2}, at::kInt);  // 2 is outside [0, 2)
  using rqat::test::require_error;
  require_error([&] { fake_quantize_ste_forward(w, s, z, g_idx, 15); }, {"g_idx[7] = 2"});
  require_error([&] { fake_quantize_ste_backward(w, w, s, z, g_idx, 15); }, {"g_idx[7] = 2"});
  auto ok = at::zeros({8}, at::kInt);
  require_error([&] { fake_quantize_ste_forward(w.to(at::kDouble), s, z, ok, 15); }, {"float32"});
  require_error(
      [&] {
        fake_quantize_ste_forward(w, s, at::ones({4, 3}), ok, 15);
      },
      {"scales and zeros"});
  require_error([&] { fake_quantize_ste_forward(w, s, z, at::zeros({7}, at::kInt), 15); },
                {"g_idx", "8 entries"});
  require_error([&] { fake_quantize_ste_forward(w, s, z, ok, 0); }, {"max_code = 0"});
  require_error(
      [&] {
        fake_quantize_ste_backward(at::randn({4, 7}), w, s, z, ok, 15);
      },
      {"gradient"});
}

// --- Dynamic per-tensor activation fake quantization (study A's output hook).

namespace {

// d<g, out>/dx by autograd (x's gradient is reset first).
at::Tensor gradient(const at::Tensor& out, at::Tensor& x, const at::Tensor& g) {
  if (x.grad().defined()) x.mutable_grad().zero_();
  out.backward(g);
  return x.grad().clone();
}

}  // namespace

TEST_CASE("dynamic per-tensor fake quant: forward equals the plain loop, bit for bit") {
  using rqat::ops::ActivationQuantGrad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  for (int bits : {8, 4, 2}) {
    for (auto grad : {ActivationQuantGrad::kReference, ActivationQuantGrad::kSte}) {
      INFO("bits " << bits << " grad " << rqat::enum_name(grad));
      auto y = at::randn({3, 5, 7}, gen) * 3;
      const auto out = rqat::ops::fake_quantize_dynamic_per_tensor(y, bits, grad);
      CHECK(at::equal(out, rqat::ops::fake_quantize_dynamic_per_tensor_ref(y, bits)));
      // At most half a step from y, the step max|y| / qmax (no value is clamped).
      const double step = y.abs().max().item<double>() / ((1 << (bits - 1)) - 1);
      CHECK((out - y).abs().max().item<double>() <= step / 2 * (1 + 1e-6));
      // bfloat16 in, bfloat16 out, computed in float32.
      const auto half = y.to(at::kBFloat16);
      CHECK(
          at::equal(rqat::ops::fake_quantize_dynamic_per_tensor(half, bits, grad),
                    rqat::ops::fake_quantize_dynamic_per_tensor_ref(half, bits).to(at::kBFloat16)));
    }
  }
  // 8 bits by hand: max|y| = 2.54, s = 0.02: 1.0 -> 50, -2.54 -> -127, 0.013 -> round(0.65) = 1.
  auto y = at::tensor({1.0f, -2.54f, 0.013f});
  const auto out = rqat::ops::fake_quantize_dynamic_per_tensor(y, 8, ActivationQuantGrad::kSte);
  const float s = 2.54f / 127;
  CHECK(at::equal(out, at::tensor({50 * s, -127 * s, 1 * s})));
  // An all-zero tensor stays zero (no 0 / 0).
  CHECK(at::equal(rqat::ops::fake_quantize_dynamic_per_tensor(at::zeros({4}), 8,
                                                              ActivationQuantGrad::kReference),
                  at::zeros({4})));
  rqat::test::require_error(
      [] {
        rqat::ops::fake_quantize_dynamic_per_tensor(at::ones({2}), 9, ActivationQuantGrad::kSte);
      },
      {"bits = 9"});
}

TEST_CASE("dynamic per-tensor fake quant: both gradients against their closed forms") {
  using rqat::ops::ActivationQuantGrad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  const int bits = 8;
  const double qmax = 127;
  for (int trial = 0; trial < 5; ++trial) {
    auto y = (at::randn({4, 6}, gen) * 2).to(at::kDouble).requires_grad_(true);
    auto g = at::randn({4, 6}, gen).to(at::kDouble);
    // Reference: only the largest |y| gets a gradient, sign(y_k) / qmax * sum_i g_i code_i.
    auto out =
        rqat::ops::fake_quantize_dynamic_per_tensor(y, bits, ActivationQuantGrad::kReference);
    const auto grad = gradient(out, y, g);
    const auto yd = y.detach();
    const int64_t k = yd.abs().flatten().argmax().item<int64_t>();
    const double s = yd.abs().max().item<double>() / qmax;
    const auto codes = at::clamp(at::round(yd / s), -qmax - 1, qmax);
    const double expected_k =
        (yd.flatten()[k].item<double>() > 0 ? 1.0 : -1.0) / qmax * (g * codes).sum().item<double>();
    auto expected = at::zeros({24}, at::kDouble);
    expected[k] = expected_k;
    CHECK(at::allclose(grad.flatten(), expected, 1e-12, 1e-12));
    // STE: the gradient passes unchanged.
    auto ste = rqat::ops::fake_quantize_dynamic_per_tensor(y, bits, ActivationQuantGrad::kSte);
    CHECK(at::equal(gradient(ste, y, g), g));
  }
  // Ties of the largest |y| share the gradient evenly (torch's max backward).
  auto y = at::tensor({1.0, -1.0, 0.25}, at::kDouble).requires_grad_(true);
  auto g = at::tensor({0.5, 2.0, -4.0}, at::kDouble);
  auto out = rqat::ops::fake_quantize_dynamic_per_tensor(y, bits, ActivationQuantGrad::kReference);
  const auto grad = gradient(out, y, g);
  // codes 127, -127, round(31.75) = 32: sum g code = 63.5 - 254 - 128 = -318.5
  const double total = -318.5 / qmax;
  CHECK(grad[0].item<double>() == Approx(total / 2).epsilon(1e-12));
  CHECK(grad[1].item<double>() == Approx(-total / 2).epsilon(1e-12));
  CHECK(grad[2].item<double>() == 0.0);
}
