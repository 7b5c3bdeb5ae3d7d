// FakeQuantLinear and fake_quantize_ste: the forward equals RTN's dequantized weight and a plain
// per-element loop (act-order g_idx, uneven last group); the STE weight gradient equals
// grad_y^T x masked by the in-range indicator; the LSQ scale and zero-point gradients equal a
// closed form written out with loops and central finite differences in float64 of the
// implementation itself; frozen mode trains no scales; to_quantized().dequantize() equals the
// forward's weight bit for bit, also after optimizer steps (LSQ and learnable clipping); the fused
// frozen-scale path gives the same bits as the ATen path (forward and weight gradient) through
// autograd, in a whole layer and against a loss; bad arguments give one-line errors.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>

#include <cmath>
#include <vector>

#include "ops/dynamic_fake_quant.h"
#include "quant/fake_quant_linear.h"
#include "quant/output_quant_linear.h"
#include "quant/rtn.h"
#include "test_util.h"

using rqat::quant::FakeQuantLinear;
using rqat::quant::FakeQuantOptions;
using rqat::quant::QuantizedWeight;
using rqat::quant::QuantSpec;
using rqat::quant::ScaleMode;

namespace {

QuantSpec spec_of(int bits, int64_t group, bool sym = false) {
  QuantSpec spec;
  spec.bits = bits;
  spec.group_size = group;
  spec.symmetric = sym;
  return spec;
}

// A shuffled g_idx (as act-order produces): column c belongs to group perm[c] / group.
at::Tensor shuffled_g_idx(int64_t in, int64_t group, at::Generator& gen) {
  auto perm = at::randperm(in, gen, at::kLong);
  return at::floor_divide(perm, group).to(at::kInt);
}

// Which elements the forward does not clamp: round(w / s) + z in [0, maxq], with plain loops.
at::Tensor in_range_mask(const at::Tensor& w, const QuantizedWeight& q) {
  auto W = w.accessor<float, 2>();
  auto S = q.scales.accessor<float, 2>();
  auto Z = q.zeros.accessor<float, 2>();
  auto G = q.g_idx.accessor<int32_t, 1>();
  const float maxq = static_cast<float>((1 << q.bits) - 1);
  auto mask = at::zeros(w.sizes(), at::kFloat);
  auto M = mask.accessor<float, 2>();
  for (int64_t r = 0; r < w.size(0); ++r) {
    for (int64_t c = 0; c < w.size(1); ++c) {
      const float code = std::nearbyint(W[r][c] / S[r][G[c]]) + Z[r][G[c]];
      M[r][c] = code >= 0 && code <= maxq ? 1.0f : 0.0f;
    }
  }
  return mask;
}

// LSQ / LSQ+ gradients of L = sum(grad_wq * w_q) written out per element (float64 sums):
//   d w_q / d s: round(v) - v inside, -z below, maxq - z above (v = w / s)
//   d w_q / d z: 0 inside, -s outside
// times g = 1 / sqrt(columns of the group * maxq) when grad_scale.
std::pair<at::Tensor, at::Tensor> lsq_closed_form(const at::Tensor& w, const at::Tensor& scales,
                                                  const at::Tensor& zeros, const at::Tensor& g_idx,
                                                  int bits, const at::Tensor& grad_wq,
                                                  bool grad_scale) {
  auto W = w.accessor<float, 2>();
  auto S = scales.accessor<float, 2>();
  auto Z = zeros.accessor<float, 2>();
  auto G = g_idx.accessor<int32_t, 1>();
  auto D = grad_wq.accessor<float, 2>();
  const float maxq = static_cast<float>((1 << bits) - 1);
  const int64_t rows = w.size(0), cols = w.size(1), groups = scales.size(1);
  std::vector<double> gs(rows * groups, 0.0), gz(rows * groups, 0.0);
  std::vector<int64_t> count(groups, 0);
  for (int64_t c = 0; c < cols; ++c) ++count[G[c]];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = G[c];
      const float s = S[r][g], z = Z[r][g];
      const float v = W[r][c] / s;
      const float code = std::nearbyint(v) + z;
      double ds = 0, dz = 0;
      if (code < 0) {
        ds = -z;
        dz = -s;
      } else if (code > maxq) {
        ds = maxq - z;
        dz = -s;
      } else {
        ds = static_cast<double>(std::nearbyint(v)) - static_cast<double>(v);
      }
      gs[r * groups + g] += D[r][c] * ds;
      gz[r * groups + g] += D[r][c] * dz;
    }
  }
  auto out_s = at::empty({rows, groups}, at::kDouble),
       out_z = at::empty({rows, groups}, at::kDouble);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const double scale = grad_scale ? 1.0 / std::sqrt(static_cast<double>(count[g]) * maxq) : 1.0;
      out_s[r][g] = gs[r * groups + g] * scale;
      out_z[r][g] = gz[r * groups + g] * scale;
    }
  }
  return {out_s, out_z};
}

void require_bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.scalar_type() == b.scalar_type());
  INFO("max |diff| = " << (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>());
  REQUIRE(at::equal(a, b));
}

}  // namespace

TEST_CASE("fake quant linear: from_rtn forward equals the RTN dequantized weight") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(101);
  struct Case {
    int bits;
    int64_t group;
    bool sym;
  };
  for (const Case& k :
       {Case{4, 16, false}, Case{3, 16, true}, Case{2, -1, false}, Case{8, 32, false}}) {
    INFO("bits " << k.bits << " group " << k.group << " sym " << k.sym);
    auto w = at::randn({7, 40}, gen) * 0.1;  // 40 = 2 groups of 16 + one of 8
    auto b = at::randn({7}, gen);
    const QuantSpec spec = spec_of(k.bits, k.group, k.sym);
    auto layer = FakeQuantLinear::from_rtn(w, spec, b);
    const QuantizedWeight rtn = rqat::quant::rtn_quantize(w, spec);
    require_bitwise_equal(layer->effective_weight(), rtn.dequantize());
    CHECK(layer->bits() == k.bits);
    CHECK(layer->group_size() == k.group);

    // The output follows x's dtype and is x w_q^T + b.
    auto x = at::randn({2, 3, 40}, gen);
    require_bitwise_equal(layer->forward(x), at::linear(x, rtn.dequantize(), b));
    auto xd = x.to(at::kDouble);
    auto yd = layer->forward(xd);
    CHECK(yd.scalar_type() == at::kDouble);
    CHECK(at::allclose(yd, at::linear(xd, rtn.dequantize().to(at::kDouble), b.to(at::kDouble)),
                       1e-12, 1e-12));

    // from_quantized starts at the dequantized weight and reproduces it.
    auto from_q = FakeQuantLinear::from_quantized(rtn, b);
    require_bitwise_equal(from_q->weight(), rtn.dequantize());
    require_bitwise_equal(from_q->effective_weight(), rtn.dequantize());
  }
}

TEST_CASE("fake quant linear: act-order g_idx forward equals a plain loop") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(102);
  const int64_t out = 6, in = 36, group = 8;  // 5 groups, the last one of 4 columns
  QuantizedWeight q;
  q.bits = 3;
  q.group_size = group;
  q.g_idx = shuffled_g_idx(in, group, gen);
  q.scales = at::rand({out, 5}, gen) * 0.05 + 0.01;
  q.zeros = at::randint(0, 8, {out, 5}, gen).to(at::kFloat);
  q.codes = at::zeros({out, in}, at::kByte);
  auto w = at::randn({out, in}, gen) * 0.15;  // wide enough that some codes clamp
  FakeQuantLinear layer(w, q);

  auto expected = at::empty({out, in});
  auto W = w.accessor<float, 2>();
  auto S = q.scales.accessor<float, 2>();
  auto Z = q.zeros.accessor<float, 2>();
  auto G = q.g_idx.accessor<int32_t, 1>();
  auto E = expected.accessor<float, 2>();
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const float s = S[r][G[c]], z = Z[r][G[c]];
      const float code = std::min(std::max(std::nearbyint(W[r][c] / s) + z, 0.0f), 7.0f);
      E[r][c] = (code - z) * s;
    }
  }
  require_bitwise_equal(layer.effective_weight(), expected);
  const double clamped = 1.0 - in_range_mask(w, q).mean().item<double>();
  INFO("clamped fraction " << clamped);
  CHECK(clamped > 0.05);  // the clamped branch is exercised
}

TEST_CASE("fake quant linear: STE weight gradient is grad_y^T x masked by the in-range set") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(103);
  const int64_t out = 9, in = 48;
  auto w0 = at::randn({out, in}, gen) * 0.1;
  const QuantizedWeight q = rqat::quant::rtn_quantize(w0, spec_of(3, 16));
  // Start from 1.4 x the weight the scales were fitted to, so that many codes clamp.
  auto w = w0 * 1.4;
  auto b = at::randn({out}, gen);
  FakeQuantLinear layer(w, q, b);
  auto x = at::randn({4, 5, in}, gen);
  auto grad_y = at::randn({4, 5, out}, gen);
  (layer.forward(x) * grad_y).sum().backward();

  auto mask = in_range_mask(w, q);
  const double inside = mask.mean().item<double>();
  INFO("in-range fraction " << inside);
  REQUIRE(inside > 0.5);
  REQUIRE(inside < 0.98);
  auto expected = at::matmul(grad_y.reshape({-1, out}).t(), x.reshape({-1, in})) * mask;
  CHECK(at::allclose(layer.weight().grad(), expected, 1e-5, 1e-5));
  // Clamped weights get exactly zero gradient.
  CHECK(at::equal(layer.weight().grad() * (1 - mask), at::zeros_like(mask)));
  CHECK(at::allclose(layer.bias()->grad(), grad_y.sum({0, 1}), 1e-5, 1e-5));

  // Frozen (default): scales and zeros are not trainable and get no gradient.
  CHECK(layer.options().mode == ScaleMode::kFrozen);
  CHECK_FALSE(layer.scales().requires_grad());
  CHECK_FALSE(layer.zeros().requires_grad());
  CHECK_FALSE(layer.scales().grad().defined());
  CHECK_FALSE(layer.zeros().grad().defined());
  CHECK_FALSE(layer.clip_gamma().defined());
}

TEST_CASE("fake quant linear: LSQ scale and zero gradients equal the closed form") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(104);
  const int64_t out = 5, in = 44, group = 16;  // groups of 16, 16, 12 columns, act-order
  for (bool grad_scale : {false, true}) {
    INFO("lsq_grad_scale " << grad_scale);
    QuantizedWeight q;
    q.bits = 4;
    q.group_size = group;
    q.g_idx = shuffled_g_idx(in, group, gen);
    q.scales = at::rand({out, 3}, gen) * 0.02 + 0.01;
    q.zeros = at::randint(0, 16, {out, 3}, gen).to(at::kFloat);
    q.codes = at::zeros({out, in}, at::kByte);
    auto w = at::randn({out, in}, gen) * 0.12;
    FakeQuantOptions options;
    options.mode = ScaleMode::kLsq;
    options.lsq_grad_scale = grad_scale;
    FakeQuantLinear layer(w, q, std::nullopt, options);
    REQUIRE(layer.scales().requires_grad());
    auto grad_wq = at::randn({out, in}, gen);
    (layer.fake_quantized_weight() * grad_wq).sum().backward();

    auto [expect_s, expect_z] =
        lsq_closed_form(w, q.scales, q.zeros, q.g_idx, 4, grad_wq, grad_scale);
    CHECK(at::allclose(layer.scales().grad().to(at::kDouble), expect_s, 1e-5, 1e-6));
    CHECK(at::allclose(layer.zeros().grad().to(at::kDouble), expect_z, 1e-5, 1e-6));
    CHECK(expect_z.abs().sum().item<double>() > 0);  // some codes clamp: z has a gradient
    // The weight still gets the clipped STE gradient.
    CHECK(at::allclose(layer.weight().grad(), grad_wq * in_range_mask(w, q), 0, 0));
  }
}

TEST_CASE("fake quant ste: scale and zero gradients match float64 finite differences") {
  // Points away from rounding and clamping boundaries: v = w / s = k + u with |u| in [0.1, 0.4],
  // and unclamped codes k + z in [1, maxq - 1] or clamped ones at least 1 outside [0, maxq], so
  // that the perturbations below change no code and no clamp decision (checked).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(105);
  const int64_t out = 4, in = 24, group = 8;
  const int bits = 3;
  const double maxq = 7;
  auto g_idx = shuffled_g_idx(in, group, gen);
  auto index = g_idx.to(at::kLong);
  auto scales = at::rand({out, 3}, gen).to(at::kDouble) * 0.05 + 0.02;
  auto zeros = at::randint(2, 6, {out, 3}, gen).to(at::kDouble);
  auto z_col = zeros.index_select(1, index), s_col = scales.index_select(1, index);
  // Codes k + z in {-3, -2, 1, 2, ..., 6, 9, 10}: some clamped below and above.
  auto code = at::randint(-3, 11, {out, in}, gen).to(at::kDouble);
  code = at::where(code == 0, at::full_like(code, -1.0), code);
  code = at::where(code == -1, at::full_like(code, -2.0), code);
  code = at::where(code == 7, at::full_like(code, 6.0), code);
  code = at::where(code == 8, at::full_like(code, 9.0), code);
  auto u = (at::rand({out, in}, gen).to(at::kDouble) * 0.3 + 0.1) *
           at::where(at::rand({out, in}, gen) < 0.5, -1.0, 1.0).to(at::kDouble);
  auto w = ((code - z_col) + u) * s_col;
  auto grad_wq = at::randn({out, in}, gen).to(at::kDouble);

  auto loss = [&](const at::Tensor& s, const at::Tensor& z) {
    at::NoGradGuard no_grad;
    return (rqat::quant::fake_quantize_ste(w, s, z, g_idx, bits) * grad_wq).sum().item<double>();
  };
  auto codes_of = [&](const at::Tensor& s, const at::Tensor& z) {
    auto unclamped = at::round(w / s.index_select(1, index)) + z.index_select(1, index);
    return at::clamp(unclamped, -1, maxq + 1);  // tells inside, below and above apart
  };
  auto sv = scales.clone().requires_grad_(true), zv = zeros.clone().requires_grad_(true);
  (rqat::quant::fake_quantize_ste(w, sv, zv, g_idx, bits) * grad_wq).sum().backward();
  auto analytic_s = sv.grad(), analytic_z = zv.grad();

  // LSQ passes the gradient through round(w / s) as if it were w / s (the STE); the true
  // derivative with the codes held fixed lacks that term, sum over unclamped elements of
  // grad * (-w / s), which the comparison adds back explicitly.
  auto unclamped = codes_of(scales, zeros);
  auto inside = at::logical_and(unclamped >= 0, unclamped <= maxq).to(at::kDouble);
  auto ste_term = at::zeros_like(scales).index_add_(1, index, grad_wq * inside * (-w / s_col));
  REQUIRE(inside.sum().item<double>() > 10);
  REQUIRE(inside.sum().item<double>() < out * in - 10);

  const double eps = 1e-6;
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t g = 0; g < 3; ++g) {
      INFO("row " << r << " group " << g);
      const double h = eps * scales[r][g].item<double>();
      auto s_plus = scales.clone(), s_minus = scales.clone();
      s_plus[r][g].add_(h);
      s_minus[r][g].sub_(h);
      REQUIRE(at::equal(codes_of(s_plus, zeros), unclamped));
      REQUIRE(at::equal(codes_of(s_minus, zeros), unclamped));
      const double fd_s = (loss(s_plus, zeros) - loss(s_minus, zeros)) / (2 * h);
      CHECK(analytic_s[r][g].item<double>() ==
            Approx(fd_s + ste_term[r][g].item<double>()).epsilon(1e-7).margin(1e-9));

      auto z_plus = zeros.clone(), z_minus = zeros.clone();
      z_plus[r][g].add_(eps);
      z_minus[r][g].sub_(eps);
      REQUIRE(at::equal(at::floor(codes_of(scales, z_plus)), unclamped));
      REQUIRE(at::equal(at::ceil(codes_of(scales, z_minus)), unclamped));
      const double fd_z = (loss(scales, z_plus) - loss(scales, z_minus)) / (2 * eps);
      CHECK(analytic_z[r][g].item<double>() == Approx(fd_z).epsilon(1e-7).margin(1e-9));
    }
  }
}

TEST_CASE("fake quant linear: export reproduces the forward bit for bit, also after training") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(106);
  const int64_t out = 8, in = 40;
  auto w = at::randn({out, in}, gen) * 0.1;
  auto x = at::randn({32, in}, gen);
  auto target = at::randn({32, out}, gen) * 0.3;
  for (ScaleMode mode : {ScaleMode::kFrozen, ScaleMode::kLsq, ScaleMode::kLearnableClip}) {
    INFO("mode " << static_cast<int>(mode));
    FakeQuantOptions options;
    options.mode = mode;
    options.lsq_grad_scale = mode == ScaleMode::kLsq;
    auto layer = FakeQuantLinear::from_rtn(w, spec_of(3, 16), at::zeros({out}), options);
    auto initial_scales = layer->to_quantized().scales;
    // Learning rates large enough that scales move and zero points cross integer values.
    std::vector<at::Tensor> master, scales, zeros_and_clip;
    for (const auto& item : layer->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      if (item.key() == "scales")
        scales.push_back(item.value());
      else if (item.key() == "weight" || item.key() == "bias")
        master.push_back(item.value());
      else
        zeros_and_clip.push_back(item.value());
    }
    std::vector<torch::optim::Adam> optimizers;
    optimizers.emplace_back(master, torch::optim::AdamOptions(0.02));
    if (!scales.empty()) optimizers.emplace_back(scales, torch::optim::AdamOptions(2e-3));
    if (!zeros_and_clip.empty())
      optimizers.emplace_back(zeros_and_clip, torch::optim::AdamOptions(0.3));
    for (int step = 0; step <= 6; ++step) {
      const QuantizedWeight exported = layer->to_quantized();
      exported.validate("exported");
      require_bitwise_equal(exported.dequantize(), layer->effective_weight());
      require_bitwise_equal(at::linear(x, exported.dequantize(), *layer->bias()),
                            layer->forward(x).detach());
      for (auto& optimizer : optimizers) optimizer.zero_grad();
      (layer->forward(x) - target).pow(2).mean().backward();
      for (auto& optimizer : optimizers) optimizer.step();
    }
    const QuantizedWeight last = layer->to_quantized();
    if (mode == ScaleMode::kFrozen) {
      CHECK(at::equal(last.scales, initial_scales));
    } else {
      CHECK_FALSE(at::equal(last.scales, initial_scales));
    }
    if (mode == ScaleMode::kLsq) {
      CHECK(layer->zeros().grad().abs().sum().item<double>() > 0);
      CHECK_FALSE(at::equal(layer->zeros().detach(), at::round(layer->zeros().detach())));
    }
    if (mode == ScaleMode::kLearnableClip)
      CHECK(layer->clip_gamma().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("fake quant linear: learnable clipping at saturated logits equals min-max RTN") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(107);
  auto w = at::randn({6, 48}, gen) * 0.1;
  w[2].zero_();  // an all-zero row takes RTN's [-1, 1] range
  FakeQuantOptions options;
  options.mode = ScaleMode::kLearnableClip;
  options.clip_init_logit = 40;  // sigmoid(40) == 1 in float32: the full min-max range
  auto layer = FakeQuantLinear::from_rtn(w, spec_of(4, 16), std::nullopt, options);
  const QuantizedWeight rtn = rqat::quant::rtn_quantize(w, spec_of(4, 16));
  CHECK(at::allclose(layer->to_quantized().scales, rtn.scales, 1e-6, 0));
  CHECK(at::equal(layer->to_quantized().zeros, rtn.zeros));
  CHECK(at::allclose(layer->effective_weight(), rtn.dequantize(), 1e-6, 1e-7));
}

TEST_CASE("fake quant ste: the fused frozen path equals the ATen path through autograd") {
  // fake_quantize_ste runs the fused kernels when no scale or zero gradient can be asked for and
  // the ATen composite (LSQ's path) when the scales require grad: both must give the same w_q and
  // the same weight gradient bit for bit, with act-order g_idx in int32 and int64.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(109);
  const int64_t out = 12, in = 100, group = 32;  // 4 groups, the last of 4 columns
  for (int bits : {2, 3, 4}) {
    for (auto index_dtype : {at::kInt, at::kLong}) {
      INFO("bits " << bits << " g_idx " << index_dtype);
      auto g_idx = shuffled_g_idx(in, group, gen).to(index_dtype);
      auto w = at::randn({out, in}, gen) * 0.1;
      // Scales fitted to 0.7 w (contiguous groups, then used with the shuffled map): many clamp.
      const QuantizedWeight q = rqat::quant::rtn_quantize(w * 0.7, spec_of(bits, group));
      auto grad_wq = at::randn({out, in}, gen);

      auto w_fused = w.clone().requires_grad_(true);
      auto y_fused = rqat::quant::fake_quantize_ste(w_fused, q.scales, q.zeros, g_idx, bits);
      (y_fused * grad_wq).sum().backward();

      auto w_aten = w.clone().requires_grad_(true);
      auto s_aten = q.scales.clone().requires_grad_(true);
      auto y_aten = rqat::quant::fake_quantize_ste(w_aten, s_aten, q.zeros, g_idx, bits);
      (y_aten * grad_wq).sum().backward();

      require_bitwise_equal(y_fused.detach(), y_aten.detach());
      require_bitwise_equal(w_fused.grad(), w_aten.grad());
      REQUIRE(s_aten.grad().defined());  // that path really was the LSQ one
      // The STE rule itself, with the mask of a plain loop.
      QuantizedWeight shuffled = q;
      shuffled.g_idx = g_idx.to(at::kInt);
      auto mask = in_range_mask(w, shuffled);
      require_bitwise_equal(w_fused.grad(), grad_wq * mask);
      const double inside = mask.mean().item<double>();
      INFO("in-range fraction " << inside);
      CHECK(inside < 0.97);  // the clamped branch is exercised
      CHECK(inside > 0.3);

      // Without grad mode the LSQ scales need no gradient either: same bits again.
      at::NoGradGuard no_grad;
      require_bitwise_equal(rqat::quant::fake_quantize_ste(w, s_aten, q.zeros, g_idx, bits),
                            y_fused.detach());
    }
  }
}

TEST_CASE("fake quant linear: a frozen layer's step equals the same step through the ATen path") {
  // A whole layer with a bias and a loss: the weight gradient of the frozen (fused) layer equals
  // the one of an LSQ layer holding the same (integral) scales and zeros, whose forward and
  // weight gradient take the ATen composite.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(110);
  auto w = at::randn({24, 64}, gen) * 0.1;
  const QuantizedWeight q = rqat::quant::rtn_quantize(w * 0.8, spec_of(2, 16));
  auto b = at::randn({24}, gen);
  auto x = at::randn({3, 7, 64}, gen);
  auto target = at::randn({3, 7, 24}, gen);
  FakeQuantLinear frozen(w, q, b);
  FakeQuantOptions lsq_options;
  lsq_options.mode = ScaleMode::kLsq;
  FakeQuantLinear lsq(w, q, b, lsq_options);
  auto y_frozen = frozen.forward(x), y_lsq = lsq.forward(x);
  require_bitwise_equal(y_frozen.detach(), y_lsq.detach());
  (y_frozen - target).pow(2).mean().backward();
  (y_lsq - target).pow(2).mean().backward();
  require_bitwise_equal(frozen.weight().grad(), lsq.weight().grad());
  require_bitwise_equal(frozen.bias()->grad(), lsq.bias()->grad());
  CHECK(lsq.scales().grad().defined());
  CHECK_FALSE(frozen.scales().grad().defined());
  const double zero_grads = (frozen.weight().grad() == 0).to(at::kDouble).mean().item<double>();
  INFO("fraction of zero weight gradients " << zero_grads);
  CHECK(zero_grads > 0.02);  // clamped weights exist
}

TEST_CASE("fake quant linear: bad arguments give one-line errors") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(108);
  auto w = at::randn({4, 32}, gen) * 0.1;
  const QuantizedWeight q = rqat::quant::rtn_quantize(w, spec_of(4, 16));
  FakeQuantOptions named;
  named.name = "model.layers.0.mlp.up_proj";
  using rqat::test::require_error;
  require_error(
      [&] {
        std::make_shared<FakeQuantLinear>(at::randn({4, 31}), q, std::nullopt, named);
      },
      {"model.layers.0.mlp.up_proj", "weight shape"});
  require_error([&] { std::make_shared<FakeQuantLinear>(w, q, at::randn({5}), named); },
                {"model.layers.0.mlp.up_proj", "bias", "4"});
  require_error([&] { std::make_shared<FakeQuantLinear>(w.to(at::kInt), q, std::nullopt, named); },
                {"model.layers.0.mlp.up_proj", "2-D float"});
  auto w_nan = w.clone();
  w_nan[1][3] = NAN;
  require_error([&] { std::make_shared<FakeQuantLinear>(w_nan, q, std::nullopt, named); }, {"NaN"});
  QuantizedWeight bad_bits = q;
  bad_bits.bits = 5;
  require_error([&] { std::make_shared<FakeQuantLinear>(w, bad_bits, std::nullopt, named); },
                {"model.layers.0.mlp.up_proj", "bits = 5"});
  QuantizedWeight bad_zeros = q;
  bad_zeros.zeros = q.zeros + 0.5;
  require_error([&] { std::make_shared<FakeQuantLinear>(w, bad_zeros, std::nullopt, named); },
                {"zeros"});
  require_error([&] { FakeQuantLinear::from_rtn(w, spec_of(6, 16)); }, {"bits"});

  FakeQuantLinear layer(w, q, std::nullopt, named);
  require_error(
      [&] {
        layer.forward(at::randn({2, 31}));
      },
      {"model.layers.0.mlp.up_proj", "in_features = 32"});
  require_error([&] { layer.forward(at::ones({2, 32}, at::kLong)); }, {"float"});

  {
    FakeQuantLinear diverged(w, q, std::nullopt, named);
    at::NoGradGuard no_grad;
    diverged.weight()[0][0].fill_(INFINITY);
    require_error([&] { diverged.to_quantized(); }, {"model.layers.0.mlp.up_proj", "NaN or inf"});
  }
  named.mode = ScaleMode::kLsq;
  FakeQuantLinear lsq(w, q, std::nullopt, named);
  {
    at::NoGradGuard no_grad;
    lsq.scales()[0][1].fill_(-0.01);
  }
  require_error([&] { lsq.forward(at::randn({2, 32})); }, {"model.layers.0.mlp.up_proj", "scale"});

  require_error(
      [&] { rqat::quant::fake_quantize_ste(w, q.scales.to(at::kDouble), q.zeros, q.g_idx, 4); },
      {"fake_quantize_ste", "dtype"});
  require_error([&] { rqat::quant::fake_quantize_ste(w, q.scales, q.zeros, q.g_idx, 7); },
                {"fake_quantize_ste", "bits = 7"});
  require_error(
      [&] { rqat::quant::fake_quantize_ste(w, q.scales, q.zeros, q.g_idx.narrow(0, 0, 5), 4); },
      {"fake_quantize_ste", "g_idx"});
}

TEST_CASE("output quant: every linear output fake-quantized, names and parameters unchanged") {
  using rqat::quant::OutputQuantOptions;
  auto model = rqat::test::random_tiny_model(rqat::model::Family::kQwen3, /*tied=*/false, 51);
  std::vector<std::string> names_before;
  std::vector<at::Tensor> params_before;
  for (const auto& item : model->named_parameters(true)) {
    names_before.push_back(item.key());
    params_before.push_back(item.value());
  }
  auto ids = at::randint(model->config().vocab_size, {2, 6},
                         at::make_generator<at::CPUGeneratorImpl>(52), at::kLong);
  const at::Tensor plain = model->forward(ids).detach();

  OutputQuantOptions options;
  options.bits = 8;
  const auto wrapped = rqat::quant::attach_output_quant(*model, options);
  const auto slots = model->linear_layers(true);
  CHECK(wrapped.size() == slots.size());
  CHECK(wrapped.back() == "lm_head");
  // Same parameter names, the same tensors (the optimizer and checkpoints see no difference).
  size_t i = 0;
  for (const auto& item : model->named_parameters(true)) {
    REQUIRE(i < names_before.size());
    CHECK(item.key() == names_before[i]);
    CHECK(item.value().is_same(params_before[i]));
    ++i;
  }
  CHECK(i == names_before.size());
  // A wrapped layer returns its inner layer's output, quantized per tensor.
  auto layer = std::dynamic_pointer_cast<rqat::quant::OutputQuantLinear>(*slots[0].layer);
  REQUIRE(layer);
  auto x = at::randn({2, 3, layer->in_features()}, at::make_generator<at::CPUGeneratorImpl>(53));
  CHECK(at::equal(layer->forward(x),
                  rqat::ops::fake_quantize_dynamic_per_tensor_ref(layer->inner()->forward(x), 8)));
  // The logits change (8-bit outputs everywhere), but not by much.
  const at::Tensor quantized = model->forward(ids).detach();
  CHECK_FALSE(at::equal(quantized, plain));
  CHECK((quantized - plain).abs().max().item<float>() < 0.1 * plain.abs().max().item<float>());
  // Removed, the model computes as before.
  rqat::quant::remove_output_quant(*model);
  for (const auto& slot : model->linear_layers(true))
    CHECK_FALSE(std::dynamic_pointer_cast<rqat::quant::OutputQuantLinear>(*slot.layer));
  CHECK(at::equal(model->forward(ids).detach(), plain));
  // Off by default; bad widths are one-line errors naming the flag.
  CHECK(rqat::quant::attach_output_quant(*model, OutputQuantOptions{}).empty());
  options.bits = 1;
  rqat::test::require_error([&] { rqat::quant::attach_output_quant(*model, options); },
                            {"--output-quant-bits", "1"});
}
