// Layers on the GPU formats' grids (quant/fp_grid_weight.h) through every tool's path: the codes'
// bit patterns against the formats' value tables, the layer form against fp_quantize bit for bit,
// `--grid` in the QuantSpec (and its JSON), RTN, GPTQ choosing codes on the format's scales (equal
// to RTN where the Hessian couples no columns, a smaller output error where it does), the
// fake-quantized layer (frozen and LSQ scales) exporting exactly what its forward computes, and the
// quant state's round trip. Awkward shapes throughout: rows not a multiple of the block, an
// all-zero block, an outlier.
#include "catch.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>

#include "quant/fake_quant_linear.h"
#include "quant/fp_grid_weight.h"
#include "quant/gptq.h"
#include "quant/quant_spec.h"
#include "quant/quant_state.h"
#include "quant/rtn.h"
#include "test_util.h"

using namespace rqat;
using quant::FpGrid;

namespace {

constexpr FpGrid kGrids[] = {FpGrid::kNvfp4, FpGrid::kMxfp4, FpGrid::kFp8};

// (rows, cols) with a partial last block (cols 45), an all-zero block and an outlier.
at::Tensor awkward_weight(int64_t rows, int64_t cols, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor w = at::randn({rows, cols}, gen) * 0.05;
  w.index_put_({1, at::indexing::Slice(0, 16)}, 0.0);
  w.index_put_({2, 5}, 3.0);
  return w;
}

quant::QuantSpec grid_spec(FpGrid grid) {
  quant::QuantSpec spec;
  spec.use_grid(enum_name(grid), "--grid");
  spec.include = {".*"};
  return spec;
}

}  // namespace

TEST_CASE("fp grid weight: codes are the formats' bit patterns, both ways") {
  // E2M1: code = sign << 3 | magnitude index; every code but -0 (8) comes back as itself.
  const at::Tensor nibbles = at::arange(16, at::kByte);
  const at::Tensor e2m1 = quant::fp_code_values(nibbles, FpGrid::kNvfp4);
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c)
    CHECK(e2m1[c].item<float>() == (c < 8 ? magnitudes[c] : -magnitudes[c - 8]));
  const at::Tensor back = quant::fp_value_codes(e2m1, FpGrid::kMxfp4);
  for (int c = 0; c < 16; ++c) CHECK(back[c].item<int>() == (c == 8 ? 0 : c));
  // E4M3: the float8_e4m3fn byte; every non-NaN byte but -0 (0x80) comes back as itself, and the
  // scalar rounding and code agree with the tensor ones.
  const at::Tensor bytes = at::arange(256, at::kInt).to(at::kByte);
  const at::Tensor values = quant::fp_code_values(bytes, FpGrid::kFp8);
  const at::Tensor codes = quant::fp_value_codes(values, FpGrid::kFp8);
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // NaN
    CHECK(codes[b].item<int>() == (b == 0x80 ? 0 : b));
    CHECK(quant::e4m3_code(values[b].item<float>()) == (b == 0x80 ? 0 : b));
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor x = at::randn({4000}, gen) * 300;
  const at::Tensor e4m3 = quant::round_to_e4m3(x), e2m1_x = quant::round_to_e2m1(x / 50);
  for (int64_t i = 0; i < x.numel(); ++i) {
    CHECK(quant::round_to_e4m3(x[i].item<float>()) == e4m3[i].item<float>());
    CHECK(quant::round_to_e2m1((x[i] / 50).item<float>()) == e2m1_x[i].item<float>());
    CHECK(quant::e2m1_code(e2m1_x[i].item<float>()) ==
          quant::fp_value_codes(e2m1_x[i], FpGrid::kNvfp4).item<int>());
  }
}

TEST_CASE("fp grid weight: the layer form dequantizes as fp_quantize, and validates") {
  const at::Tensor w = awkward_weight(6, 45, 3);
  for (const FpGrid grid : kGrids) {
    INFO(enum_name(grid));
    const quant::FpQuantized reference = quant::fp_quantize(w, grid, "w");
    const quant::QuantizedWeight q = quant::fp_grid_quantize(w, grid, "w");
    q.validate("w");
    CHECK(q.bits == (grid == FpGrid::kFp8 ? 8 : 4));
    CHECK(q.group_size == (grid == FpGrid::kNvfp4 ? 16 : grid == FpGrid::kMxfp4 ? 32 : -1));
    CHECK(at::equal(q.dequantize(), quant::fp_dequantize(reference)));
    const quant::FpQuantized back = quant::fp_quantized(q);
    CHECK(at::equal(back.codes.abs(), reference.codes.abs()));
    CHECK(at::equal(back.scales, reference.scales));
    CHECK(back.global_scale == reference.global_scale);
    // What the format cannot hold is refused, naming the layer.
    quant::QuantizedWeight bad = q;
    bad.zeros = at::ones_like(q.zeros);
    test::require_error([&] { bad.validate("layer.x"); }, {"layer.x", "zeros must be 0"});
    bad = q;
    bad.group_size = 64;
    test::require_error([&] { bad.validate("layer.x"); }, {"layer.x", "groups of"});
    if (grid == FpGrid::kNvfp4) {
      bad = q;
      bad.scales = q.scales + 0.01f;
      test::require_error([&] { bad.validate("layer.x"); }, {"layer.x", "E4M3"});
    }
    if (grid == FpGrid::kMxfp4) {
      bad = q;
      bad.scales = q.scales * 1.5f;
      test::require_error([&] { bad.validate("layer.x"); }, {"layer.x", "powers of two"});
    }
    if (grid == FpGrid::kFp8) {
      bad = q;
      bad.codes = q.codes.clone();
      bad.codes.index_put_({0, 0}, 0x7F);
      test::require_error([&] { bad.validate("layer.x"); }, {"layer.x", "NaN"});
    }
  }
}

TEST_CASE("fp grid weight: --grid names set the spec; its JSON reads back; mismatches refused") {
  quant::QuantSpec spec;
  spec.use_grid("nvfp4", "--grid");
  CHECK((spec.fp_grid == FpGrid::kNvfp4 && spec.bits == 4 && spec.group_size == 16 &&
         spec.symmetric));
  CHECK(spec.describe() == "nvfp4 grid (W4, blocks of 16)");
  spec.use_grid("fp8", "--grid");
  CHECK((spec.fp_grid == FpGrid::kFp8 && spec.bits == 8 && spec.group_size == -1));
  for (const FpGrid grid : kGrids) {
    const quant::QuantSpec s = grid_spec(grid);
    const quant::QuantSpec back = quant::QuantSpec::from_json(s.to_json(), "quant");
    CHECK(back.fp_grid == grid);
    CHECK(back.to_json() == s.to_json());
  }
  quant::QuantSpec preset;
  preset.use_grid("int4-w4a16", "--grid");
  CHECK((!preset.grid_name() && preset.bits == 4 && preset.group_size == 128 && preset.symmetric));
  quant::QuantSpec gguf;
  gguf.use_grid("nvfp4", "--grid");
  gguf.use_grid("gguf-q4_0", "--grid");
  CHECK((!gguf.fp_grid && gguf.gguf_grid));
  test::require_error([] { quant::QuantSpec().use_grid("fp4", "--grid"); },
                      {"--grid = fp4", "nvfp4", "mxfp4", "fp8", "int4-w4a16", "gguf-q4_k"});
  quant::QuantSpec mismatch = grid_spec(FpGrid::kMxfp4);
  mismatch.bits = 3;
  test::require_error([&] { mismatch.validate("--"); }, {"--grid = mxfp4", "--bits = 3"});
  io::Json json = grid_spec(FpGrid::kNvfp4).to_json();
  json["group_size"] = 32;
  test::require_error([&] { quant::QuantSpec::from_json(json, "quant"); },
                      {"quant.grid = nvfp4", "quant.group_size = 32"});
}

TEST_CASE("fp grid weight: RTN is the reference; GPTQ chooses codes on the same scales") {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor w = awkward_weight(8, 64, 7);
  // Calibration inputs with correlated columns, so that GPTQ's updates matter.
  const at::Tensor mix = at::randn({64, 64}, gen);
  const at::Tensor x = at::matmul(at::randn({512, 64}, gen), mix);
  const at::Tensor h = 2 * at::matmul(x.t(), x) / x.size(0);
  for (const FpGrid grid : kGrids) {
    INFO(enum_name(grid));
    const quant::QuantSpec spec = grid_spec(grid);
    const quant::QuantizedWeight rtn = quant::rtn_quantize(w, spec);
    CHECK(at::equal(rtn.dequantize(), quant::fp_grid_quantize(w, grid, "w").dequantize()));
    // A diagonal Hessian couples no columns: GPTQ's codes are RTN's.
    quant::GptqOptions options;
    options.return_output = true;
    quant::GptqReport report;
    const quant::QuantizedWeight diagonal =
        quant::gptq_quantize(w, at::diag(at::rand({64}, gen) + 0.5), spec, options, &report);
    diagonal.validate("gptq");
    CHECK(at::equal(diagonal.codes, rtn.codes));
    CHECK(at::equal(diagonal.scales, rtn.scales));
    CHECK(at::equal(report.output, diagonal.dequantize()));
    // With correlated inputs its output error is smaller, on the format's own scales.
    const quant::QuantizedWeight gptq = quant::gptq_quantize(w, h.clone(), spec, options, &report);
    CHECK(at::equal(gptq.scales, rtn.scales));
    CHECK(at::equal(report.output, gptq.dequantize()));
    const auto output_error = [&](const quant::QuantizedWeight& q) {
      return (at::matmul(x, (w - q.dequantize()).t())).pow(2).sum().item<double>();
    };
    CHECK(output_error(gptq) < output_error(rtn));
  }
}

TEST_CASE("fp grid weight: the fake-quantized layer exports exactly what its forward computes") {
  const at::Tensor w = awkward_weight(6, 48, 9);
  for (const FpGrid grid : kGrids) {
    for (const auto mode : {quant::ScaleMode::kFrozen, quant::ScaleMode::kLsq}) {
      INFO(enum_name(grid) << " " << enum_name(mode));
      const quant::QuantizedWeight start = quant::fp_grid_quantize(w, grid, "w");
      quant::FakeQuantOptions options;
      options.mode = mode;
      auto layer = std::make_shared<quant::FakeQuantLinear>(w, start, std::nullopt, options);
      // At the start: the ptq layer, code for code.
      CHECK(at::equal(layer->effective_weight(), start.dequantize()));
      CHECK(at::equal(layer->to_quantized().codes, start.codes));
      // A few optimizer steps move weights (and LSQ's scales); export stays exact.
      torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.05));
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(21);
      const at::Tensor x = at::randn({32, 48}, gen);
      const at::Tensor target = at::randn({32, 6}, gen);
      for (int step = 0; step < 5; ++step) {
        sgd.zero_grad();
        const at::Tensor loss = (layer->forward(x) - target).pow(2).mean();
        loss.backward();
        REQUIRE(at::isfinite(layer->weight().grad()).all().item<bool>());
        sgd.step();
      }
      const quant::QuantizedWeight exported = layer->to_quantized();
      exported.validate("exported");
      CHECK(at::equal(exported.dequantize(), layer->effective_weight()));
      if (mode == quant::ScaleMode::kLsq) {
        // The scales learned (mxfp4's powers of two move only once the log ratio passes 1/2).
        const auto named = layer->named_parameters();
        CHECK(named["log_scale_ratios"].abs().max().item<float>() > 0);
        if (grid != FpGrid::kMxfp4) CHECK_FALSE(at::equal(exported.scales, start.scales));
      } else {
        CHECK(at::equal(exported.scales, start.scales));
      }
    }
  }
  // The clipped straight-through gradient: 0 for a weight beyond the grid's largest value.
  const quant::QuantizedWeight start = quant::fp_grid_quantize(w, FpGrid::kMxfp4, "w");
  at::Tensor far = w.clone();
  far.index_put_({0, 0}, 100.0);
  quant::FakeQuantLinear layer(far, start);
  layer.forward(at::ones({1, 48})).sum().backward();
  CHECK(layer.weight().grad()[0][0].item<float>() == 0.0f);
  CHECK(layer.weight().grad()[0][1].item<float>() == 1.0f);
  quant::FakeQuantOptions clip;
  clip.mode = quant::ScaleMode::kLearnableClip;
  test::require_error([&] { quant::FakeQuantLinear(w, start, std::nullopt, clip); },
                      {"--scale-mode clip", "mxfp4"});
}

TEST_CASE("fp grid weight: the quant state keeps a grid's layers exactly") {
  test::TempDir dir("fp_grid_state");
  for (const FpGrid grid : kGrids) {
    INFO(enum_name(grid));
    quant::QuantState state;
    state.spec = grid_spec(grid);
    state.layers["model.layers.0.mlp.up_proj"] =
        quant::fp_grid_quantize(awkward_weight(6, 45, 4), grid, "w");
    quant::save_quant_state(dir.path(), state);
    const quant::QuantState back = quant::load_quant_state(dir.path());
    const auto& a = state.layers.begin()->second;
    const auto& b = back.layers.at("model.layers.0.mlp.up_proj");
    CHECK(back.spec.fp_grid == grid);
    CHECK(at::equal(a.codes, b.codes));
    CHECK(at::equal(a.dequantize(), b.dequantize()));
  }
}
