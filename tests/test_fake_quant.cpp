// Group-wise fake quantization on the CPU: the ATen path equals the plain reference bit for bit on
// seeded random inputs with awkward shapes, matches a hand-computed case, and rejects bad shapes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "ops/fake_quant.h"
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
