// RTN and the uniform quantizer: codes, scales and zeros equal a closed-form per-element
// computation written out below with plain loops (asym/sym, 2/3/4/8 bits, per-channel, group 32,
// an uneven last group, clipping search on and off), a hand-computed example, agreement of
// dequantize() with ops::fake_quantize_groupwise, and the clipping search never increasing the
// error it minimizes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/fake_quant.h"
#include "quant/rtn.h"
#include "quant/uniform_quantizer.h"
#include "test_util.h"

using rqat::quant::QuantizedWeight;
using rqat::quant::QuantSpec;
using rqat::quant::rtn_quantize;

namespace {

struct ClosedForm {
  at::Tensor codes, scales, zeros;
};

// The GPTQ reference quantizer's rule, one row and group at a time: range [min(w,0), max(w,0)]
// (symmetric: +-max|w|, all-zero: [-1, 1]); scale = range / maxq; zero = round(-lo / scale) or
// (maxq + 1) / 2; with clipping, the range scaled by p = 1 - i/100 (i < 80) with the smallest
// sum |w' - w|^2.4 (first one on ties).
ClosedForm closed_form(const at::Tensor& weight, int bits, int64_t group_size, bool sym,
                       bool clip) {
  auto w = weight.to(at::kFloat).contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  const int64_t gs = group_size == -1 ? cols : group_size;
  const int64_t groups = (cols + gs - 1) / gs;
  const float maxq = static_cast<float>((1 << bits) - 1);
  auto codes = at::empty({rows, cols}, at::kByte);
  auto scales = at::empty({rows, groups}), zeros = at::empty({rows, groups});
  auto W = w.accessor<float, 2>();
  auto C = codes.accessor<uint8_t, 2>();
  auto S = scales.accessor<float, 2>();
  auto Z = zeros.accessor<float, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * gs, c1 = std::min(cols, c0 + gs);
      float lo = 0, hi = 0;
      for (int64_t c = c0; c < c1; ++c) {
        lo = std::min(lo, W[r][c]);
        hi = std::max(hi, W[r][c]);
      }
      if (sym) {
        hi = std::max(-lo, hi);
        lo = -hi;
      }
      if (lo == 0 && hi == 0) {
        lo = -1;
        hi = 1;
      }
      float scale = (hi - lo) / maxq;
      float zero = sym ? (maxq + 1) / 2 : std::nearbyint(-lo / scale);
      if (clip) {
        double best = std::numeric_limits<double>::infinity();
        for (int i = 0; i < 80; ++i) {
          const float p = static_cast<float>(1.0 - i / 100.0);
          const float s = (p * hi - p * lo) / maxq;
          const float z = sym ? (maxq + 1) / 2 : std::nearbyint(-(p * lo) / s);
          double err = 0;
          for (int64_t c = c0; c < c1; ++c) {
            float q = std::nearbyint(W[r][c] / s) + z;
            q = std::min(std::max(q, 0.0f), maxq);
            err += std::pow(std::fabs(static_cast<double>((q - z) * s - W[r][c])), 2.4);
          }
          if (err < best) {
            best = err;
            scale = s;
            zero = z;
          }
        }
      }
      S[r][g] = scale;
      Z[r][g] = zero;
      for (int64_t c = c0; c < c1; ++c) {
        const float q = std::nearbyint(W[r][c] / scale) + zero;
        C[r][c] = static_cast<uint8_t>(std::min(std::max(q, 0.0f), maxq));
      }
    }
  }
  return {codes, scales, zeros};
}

// Weights with a few large outliers per row, where clipping pays off.
at::Tensor weights_with_outliers(int64_t rows, int64_t cols, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto w = at::randn({rows, cols}, gen) * 0.02;
  auto outliers = at::rand({rows, cols}, gen) < 0.02;
  return at::where(outliers, w * 8, w);
}

// Per row and group: sum |w' - w|^norm.
at::Tensor group_errors(const at::Tensor& w, const at::Tensor& dq, int64_t gs, double norm) {
  const int64_t cols = w.size(1), groups = (cols + gs - 1) / gs;
  std::vector<at::Tensor> out;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t width = std::min(gs, cols - g * gs);
    out.push_back((dq.narrow(1, g * gs, width) - w.narrow(1, g * gs, width))
                      .to(at::kDouble)
                      .abs()
                      .pow(norm)
                      .sum(1));
  }
  return at::stack(out, 1);
}

}  // namespace

TEST_CASE("rtn: codes, scales and zeros equal the closed form") {
  struct Shape {
    int64_t rows, cols, group;
  };
  // Per-channel, group 32, an uneven last group (172 = 5 * 32 + 12, stories260K's down_proj),
  // a group wider than the layer, and a single column.
  const Shape shapes[] = {{6, 64, -1}, {5, 96, 32}, {4, 172, 32}, {3, 40, 64}, {3, 1, 32}};
  uint64_t seed = 100;
  for (const auto& shape : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (bool sym : {false, true}) {
        for (bool clip : {false, true}) {
          INFO("rows " << shape.rows << " cols " << shape.cols << " group " << shape.group
                       << " bits " << bits << " sym " << sym << " clip " << clip);
          auto w = weights_with_outliers(shape.rows, shape.cols, ++seed);
          // A row that is all zero and a row that is all positive: the range edge cases.
          w[0].zero_();
          if (shape.rows > 2) w[2] = w[2].abs();
          QuantSpec spec;
          spec.bits = bits;
          spec.group_size = shape.group;
          spec.symmetric = sym;
          spec.clip_search = clip;
          const QuantizedWeight q = rtn_quantize(w, spec);
          q.validate("rtn");
          const auto expected = closed_form(w, bits, shape.group, sym, clip);
          CHECK(at::equal(q.codes, expected.codes));
          CHECK(at::equal(q.scales, expected.scales));
          CHECK(at::equal(q.zeros, expected.zeros));
          const int64_t gs = shape.group == -1 ? shape.cols : shape.group;
          CHECK(at::equal(q.g_idx, at::arange(shape.cols, at::kInt).div(gs, "floor")));
          CHECK(q.bits == bits);
          CHECK(q.group_size == shape.group);
          // The all-zero row is represented exactly.
          CHECK(at::equal(q.dequantize()[0], at::zeros({shape.cols})));
        }
      }
    }
  }
}

TEST_CASE("rtn: per-tensor is the closed form over every value of the weight") {
  uint64_t seed = 300;
  for (int bits : {2, 4, 8}) {
    for (bool sym : {false, true}) {
      for (bool clip : {false, true}) {
        INFO("bits " << bits << " sym " << sym << " clip " << clip);
        auto w = weights_with_outliers(7, 48, ++seed);
        QuantSpec spec;
        spec.bits = bits;
        spec.group_size = -1;
        spec.symmetric = sym;
        spec.clip_search = clip;
        spec.per_tensor = true;
        const QuantizedWeight q = rtn_quantize(w, spec);
        q.validate("rtn");
        // The whole weight as one row of the closed form.
        const auto one = closed_form(w.reshape({1, -1}), bits, -1, sym, clip);
        CHECK(at::equal(q.codes, one.codes.view_as(q.codes)));
        CHECK(q.scales.sizes() == at::IntArrayRef({7, 1}));
        CHECK(at::equal(q.scales, one.scales.expand({7, 1})));
        CHECK(at::equal(q.zeros, one.zeros.expand({7, 1})));
      }
    }
  }
  // Study A's 8-bit rule: s = max|W| / 127, clamp(round(W / s), -128, 127) s. rqat's symmetric
  // step is 2 max|W| / 255 (the GPTQ convention), 0.4% finer, so the two differ by at most one
  // of their steps per weight (the study's step bounds it), and both stay within it of W.
  auto w = at::randn({16, 64}, at::make_generator<at::CPUGeneratorImpl>(9)) * 0.03;
  QuantSpec spec;
  spec.bits = 8;
  spec.group_size = -1;
  spec.symmetric = true;
  spec.per_tensor = true;
  const at::Tensor ours = rtn_quantize(w, spec).dequantize();
  const float study_step = w.abs().max().item<float>() / 127;
  const at::Tensor study = at::clamp(at::round(w / study_step), -128, 127) * study_step;
  CHECK((ours - study).abs().max().item<float>() <= study_step);
  CHECK((ours - w).abs().max().item<float>() <= study_step / 2 * 1.0001f);
}

TEST_CASE("rtn: v1 zeros keep asymmetric zero points >= 1 and the whole range") {
  // Hand example, 2 bits, range [0, 0.9]: the min-max rule gives scale 0.3 and zero 0; v1 zeros
  // give scale 0.9 / (3 - 1) = 0.45 and zero 1: codes round(w / 0.45) + 1.
  auto w = at::tensor({0.0f, 0.1f, 0.5f, 0.9f}).view({1, 4});
  QuantSpec spec;
  spec.bits = 2;
  spec.group_size = -1;
  CHECK(rtn_quantize(w, spec).zeros.item<float>() == 0.0f);
  spec.v1_zeros = true;
  auto q = rtn_quantize(w, spec);
  CHECK(q.zeros.item<float>() == 1.0f);
  CHECK(q.scales.item<float>() == 0.9f / 2);
  CHECK(at::equal(q.codes, at::tensor({1, 1, 2, 3}, at::kByte).view({1, 4})));

  // Random groups, many with a minimum near 0: zeros >= 1 everywhere; groups whose zero was
  // already >= 1 keep their parameters; the others hold their whole range (no clipping: every
  // weight within half a step of its value).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto x = at::rand({64, 96}, gen) * 0.05 - at::rand({64, 1}, gen) * 0.004;
  for (int bits : {2, 3, 4}) {
    INFO("bits " << bits);
    QuantSpec plain;
    plain.bits = bits;
    plain.group_size = 32;
    QuantSpec v1 = plain;
    v1.v1_zeros = true;
    const QuantizedWeight a = rtn_quantize(x, plain), b = rtn_quantize(x, v1);
    const auto was_zero = a.zeros == 0;
    CHECK(was_zero.any().item<bool>());
    CHECK((b.zeros >= 1).all().item<bool>());
    const auto kept = was_zero.logical_not();
    CHECK(at::equal(a.scales.masked_select(kept), b.scales.masked_select(kept)));
    CHECK(at::equal(a.zeros.masked_select(kept), b.zeros.masked_select(kept)));
    const auto step = b.scales.repeat_interleave(32, 1);
    CHECK(((b.dequantize() - x).abs() <= step / 2 * 1.0001).all().item<bool>());
  }
}

TEST_CASE("rtn: a hand-computed 2-bit example") {
  // Asymmetric: range [-1, 1], scale 2/3, zero round(1.5) = 2 (half to even);
  // w / scale = -1.5, -0.75, 0.3, 1.5 -> round -2, -1, 0, 2 -> +2 -> 0, 1, 2, 4 -> clamp 3.
  auto w = at::tensor({-1.0f, -0.5f, 0.2f, 1.0f}).view({1, 4});
  QuantSpec spec;
  spec.bits = 2;
  spec.group_size = -1;
  auto q = rtn_quantize(w, spec);
  CHECK(at::equal(q.codes, at::tensor({0, 1, 2, 3}, at::kByte).view({1, 4})));
  CHECK(q.scales.item<float>() == 2.0f / 3.0f);
  CHECK(q.zeros.item<float>() == 2.0f);
  // Symmetric: a = 1, scale 2/3, zero 2: same codes here.
  spec.symmetric = true;
  q = rtn_quantize(w, spec);
  CHECK(q.zeros.item<float>() == 2.0f);
  CHECK(at::equal(q.codes, at::tensor({0, 1, 2, 3}, at::kByte).view({1, 4})));
}

TEST_CASE("rtn: dequantize agrees with the fake-quant op and stays within half a step") {
  auto w = weights_with_outliers(8, 128, 7);
  for (int bits : {2, 3, 4, 8}) {
    for (int64_t group : {int64_t{-1}, int64_t{32}, int64_t{64}}) {
      INFO("bits " << bits << " group " << group);
      QuantSpec spec;
      spec.bits = bits;
      spec.group_size = group;
      auto q = rtn_quantize(w, spec);
      auto dq = q.dequantize();
      CHECK(at::equal(dq, rqat::ops::fake_quantize_groupwise(w, q.scales, q.zeros, bits, group)));
      auto step = q.scales.index_select(1, q.g_idx.to(at::kLong));
      CHECK(((dq - w).abs() <= step * 0.5 * (1 + 1e-6)).all().item<bool>());
    }
  }
}

TEST_CASE("rtn: the clipping search lowers the error it minimizes") {
  auto w = weights_with_outliers(16, 256, 9);
  for (int bits : {2, 3, 4}) {
    for (bool sym : {false, true}) {
      INFO("bits " << bits << " sym " << sym);
      QuantSpec spec;
      spec.bits = bits;
      spec.group_size = 64;
      spec.symmetric = sym;
      auto plain = rtn_quantize(w, spec).dequantize();
      spec.clip_search = true;
      auto clipped = rtn_quantize(w, spec).dequantize();
      // p = 1 is one of the candidates: per row and group the 2.4-norm error cannot grow...
      auto e_plain = group_errors(w, plain, 64, 2.4), e_clip = group_errors(w, clipped, 64, 2.4);
      CHECK((e_clip <= e_plain).all().item<bool>());
      // ...and with outliers it shrinks, also in squared error over the layer.
      CHECK(e_clip.sum().item<double>() < 0.95 * e_plain.sum().item<double>());
      CHECK((clipped - w).pow(2).sum().item<double>() < (plain - w).pow(2).sum().item<double>());
    }
  }
}

TEST_CASE("rtn: bfloat16 weights are quantized in float32") {
  auto w = weights_with_outliers(4, 64, 3).to(at::kBFloat16);
  QuantSpec spec;
  spec.group_size = 32;
  auto from_bf16 = rtn_quantize(w, spec);
  auto from_f32 = rtn_quantize(w.to(at::kFloat), spec);
  CHECK(at::equal(from_bf16.codes, from_f32.codes));
  CHECK(at::equal(from_bf16.scales, from_f32.scales));
}

TEST_CASE("rtn: bad inputs are one-line errors") {
  QuantSpec spec;
  spec.bits = 5;
  rqat::test::require_error([&] { rtn_quantize(at::randn({4, 8}), spec); }, {"quant.bits", "5"});
  spec.bits = 4;
  spec.group_size = 0;
  rqat::test::require_error([&] { rtn_quantize(at::randn({4, 8}), spec); }, {"quant.group_size"});
  spec.group_size = 4;
  rqat::test::require_error([&] { rtn_quantize(at::randn({4}), spec); }, {"2-D"});
  auto w = at::randn({4, 8});
  w[1][3] = std::numeric_limits<float>::quiet_NaN();
  rqat::test::require_error([&] { rtn_quantize(w, spec); }, {"NaN"});
}
