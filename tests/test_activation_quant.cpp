// Activation quantization as GPU engines serve it (quant/activation_quant.h): FP8 per-token,
// NVFP4 per-16 blocks under a calibrated static global scale, MXFP4 per-32 power-of-two blocks,
// each checked value by value against a plain loop over the formats' definitions (scalar
// rounding of quant/fp_grid.h) on fresh random inputs with an all-zero block and outliers, with
// the clipped straight-through gradient; the calibration of NVFP4's input global scales (448 * 6 /
// max|x| of the unquantized inputs, evaluated as 2688 * (1 / max), as compressed-tensors'
// static_minmax observer), by the model pass and by ptq's block pass; the scales' trip through the
// fake quantizer, the quant state and load_model; and the refusals, naming the layer.
#include "catch.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "io/artifact.h"
#include "model/model_dir.h"
#include "quant/activation_quant.h"
#include "quant/capturing_linear.h"
#include "quant/fake_quant_linear.h"
#include "quant/fp_grid_weight.h"
#include "quant/load_model.h"
#include "quant/ptq.h"
#include "quant/quant_state.h"
#include "test_util.h"

using namespace rqat;
using quant::FpGrid;

namespace {

constexpr FpGrid kGrids[] = {FpGrid::kNvfp4, FpGrid::kMxfp4, FpGrid::kFp8};
// Every quantized layer of the byte-level test model whose inputs are whole blocks of 32
// (o_proj's 72 inputs are not).
const char* kWholeBlockLayers =
    R"(model\.layers\.\d+\.(mlp\.(gate|up)_proj|self_attn\.[qkv]_proj))";

float block_scale(float amax, FpGrid grid, float global) {
  switch (grid) {
    case FpGrid::kNvfp4:
      return quant::round_to_e4m3(amax / 6.0f * global);
    case FpGrid::kMxfp4: {
      if (amax == 0) return std::ldexp(1.0f, -127);
      int exponent = 0;
      std::frexp(amax, &exponent);  // amax = m 2^exponent, m in [0.5, 1)
      return std::ldexp(1.0f, std::clamp(exponent - 3, -127, 127));
    }
    default:
      return std::max(amax / 448.0f, std::numeric_limits<float>::epsilon());
  }
}

struct Reference {
  at::Tensor values;  // float32 (tokens, features)
  at::Tensor pass;    // where the gradient passes
};

// The definitions one value at a time: x (tokens, features) float32.
Reference reference_quantize(const at::Tensor& x, FpGrid grid, float global) {
  const int64_t tokens = x.size(0), features = x.size(1);
  const int64_t block = grid == FpGrid::kFp8 ? features : grid == FpGrid::kNvfp4 ? 16 : 32;
  const float largest = grid == FpGrid::kFp8 ? 448.0f : 6.0f;
  at::Tensor out = at::zeros_like(x);
  at::Tensor pass = at::zeros({tokens, features}, at::kBool);
  const auto in = x.accessor<float, 2>();
  auto o = out.accessor<float, 2>();
  auto p = pass.accessor<bool, 2>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t b = 0; b < features; b += block) {
      float amax = 0;
      for (int64_t c = b; c < b + block; ++c) amax = std::max(amax, std::fabs(in[t][c]));
      const float scale = block_scale(amax, grid, global);
      const float effective = grid == FpGrid::kNvfp4 ? scale / global : scale;
      for (int64_t c = b; c < b + block; ++c) {
        if (effective <= 0) {
          o[t][c] = 0, p[t][c] = false;
          continue;
        }
        const float ratio = in[t][c] / effective;
        o[t][c] = quant::fp_round(ratio, grid) * effective;
        p[t][c] = std::fabs(ratio) <= largest;
      }
    }
  }
  return {out, pass};
}

// (2, 5, 64) activations: random, one all-zero block, an outlier token and an outlier value.
at::Tensor awkward_activations(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor x = at::randn({2, 5, 64}, gen) * 2;
  x.index_put_({0, 1, at::indexing::Slice(0, 32)}, 0.0);
  x.index_put_({1, 3}, x.index({1, 3}) * 300);
  x.index_put_({1, 0, 7}, -70.0);
  return x;
}

// Every whole-block layer's input max|x| over forward passes of the plain model (captured before
// the layer: an independent route to what calibration must compute).
std::map<std::string, float> observed_input_max(model::CausalLM& model,
                                                const std::vector<at::Tensor>& batches,
                                                const quant::QuantSpec& spec) {
  std::map<std::string, float> max;
  std::vector<std::unique_ptr<quant::ScopedCapture>> captures;
  for (const auto& slot : model.linear_layers(true)) {
    if (!spec.quantizes(slot.name)) continue;
    captures.push_back(
        std::make_unique<quant::ScopedCapture>(slot, [&max, name = slot.name](const at::Tensor& x) {
          max[name] = std::max(max[name], x.abs().max().item<float>());
        }));
  }
  at::NoGradGuard no_grad;
  for (const auto& ids : batches) model.forward(ids);
  return max;
}

quant::QuantSpec nvfp4_activation_spec() {
  quant::QuantSpec spec;
  spec.use_grid("nvfp4", "test");
  spec.activations = FpGrid::kNvfp4;
  spec.include = {kWholeBlockLayers};
  return spec;
}

}  // namespace

TEST_CASE("activation quant: each format's definition value by value, clipped straight through") {
  for (const FpGrid grid : kGrids) {
    for (const uint64_t seed : {11u, 12u}) {
      INFO(enum_name(grid) << " seed " << seed);
      const at::Tensor x = awkward_activations(seed).requires_grad_(true);
      // A calibrated max below the outliers: nvfp4 blocks holding them saturate and clip.
      const float global = 448.0f * 6.0f / 20.0f;
      const at::Tensor q =
          quant::fake_quantize_activations(x, grid, at::full({1}, global, at::kFloat));
      const Reference ref = reference_quantize(x.detach().reshape({10, 64}), grid, global);
      CHECK(at::equal(q.detach().reshape({10, 64}), ref.values));
      q.sum().backward();
      CHECK(at::equal(x.grad().reshape({10, 64}), ref.pass.to(at::kFloat)));
      // The clip is exercised where the format clips: nvfp4 past the calibrated max, mxfp4's
      // largest values of a block (up to 8 steps); fp8 only where x / scale rounds past 448.
      const double passing = ref.pass.to(at::kFloat).mean().item<double>();
      if (grid == FpGrid::kFp8)
        CHECK(passing > 0.99);
      else
        CHECK(passing < 1.0);
    }
  }
  // Any float dtype in, the same dtype out, computed in float32.
  const at::Tensor half = awkward_activations(13).to(at::kBFloat16);
  const at::Tensor q = quant::fake_quantize_activations(half, FpGrid::kFp8);
  CHECK(q.scalar_type() == at::kBFloat16);
  CHECK(at::equal(q, reference_quantize(half.to(at::kFloat).reshape({10, 64}), FpGrid::kFp8, 1)
                         .values.reshape({2, 5, 64})
                         .to(at::kBFloat16)));

  test::require_error(
      [] {
        quant::fake_quantize_activations(at::ones({2, 16}), FpGrid::kNvfp4);
      },
      {"nvfp4", "global scale"});
  test::require_error(
      [] {
        quant::fake_quantize_activations(at::ones({2, 40}), FpGrid::kMxfp4);
      },
      {"40 features", "32"});
  test::require_error([] { quant::InputQuantizer(FpGrid::kNvfp4, "layer.o_proj", 72); },
                      {"layer.o_proj", "72 inputs", "16"});
  quant::InputQuantizer uncalibrated(FpGrid::kNvfp4, "layer.q_proj", 48);
  CHECK(uncalibrated.needs_calibration());
  test::require_error([&] { uncalibrated(at::ones({1, 48})); }, {"layer.q_proj", "calibration"});
  test::require_error([&] { uncalibrated.set_input_global_scale(at::full({1}, NAN)); },
                      {"layer.q_proj", "positive finite"});
  // fp8 and mxfp4 have no global part: nothing to calibrate.
  CHECK_FALSE(quant::InputQuantizer(FpGrid::kFp8, "x", 48).needs_calibration());
}

TEST_CASE("activation quant: calibration observes the unquantized inputs; the scales travel") {
  test::TempDir dir("activation_calibration");
  const auto model_dir = test::write_byte_level_model(dir);
  const quant::QuantSpec spec = nvfp4_activation_spec();
  const std::vector<at::Tensor> batches = {
      at::tensor({3, 17, 42, 99, 5, 61}, at::kLong).view({2, 3}),
      at::tensor({84, 104, 101, 32, 115, 117, 109, 7}, at::kLong).view({1, 8})};
  const auto plain = model::load_causal_lm(model_dir);
  const std::map<std::string, float> expected = observed_input_max(*plain, batches, spec);
  REQUIRE(expected.size() == 10);  // q, k, v, gate, up of 2 blocks

  auto model = model::load_causal_lm(model_dir);
  CHECK(quant::attach_activation_quant(*model, spec, {}) == 10);
  CHECK(quant::uncalibrated_input_layers(*model).size() == 10);
  test::require_error([&] { model->forward(batches[0]); }, {"model.layers.0", "calibration"});
  const auto scales = quant::calibrate_input_global_scales(*model, [&] {
    for (const auto& ids : batches) model->forward(ids);
  });
  REQUIRE(scales.size() == 10);
  for (const auto& [name, max] : expected) {
    INFO(name);
    CHECK(scales.at(name).item<float>() == 448.0f * 6.0f * (1.0f / max));
  }
  CHECK(quant::uncalibrated_input_layers(*model).empty());
  CHECK(quant::calibrate_input_global_scales(*model, [] { FAIL("nothing to calibrate"); }).empty());
  const at::Tensor logits = model->forward(batches[1]);
  CHECK_FALSE(at::equal(logits, plain->forward(batches[1])));

  // Through the quant state: load_model wraps the layers with the same scales, same logits.
  quant::QuantState state;
  state.spec = spec;
  for (const auto& slot : plain->linear_layers(true)) {
    if (!spec.quantizes(slot.name)) continue;
    quant::QuantizedWeight q =
        quant::fp_grid_quantize((*slot.layer)->effective_weight(), FpGrid::kNvfp4, slot.name);
    q.input_global_scale = scales.at(slot.name);
    state.layers.emplace(slot.name, std::move(q));
  }
  quant::save_quant_state(model_dir, state);
  const auto read = quant::read_input_global_scales(model_dir);
  CHECK(read.size() == 10);
  CHECK(at::equal(quant::load_quant_state(model_dir).layers.begin()->second.input_global_scale,
                  state.layers.begin()->second.input_global_scale));
  const auto loaded = quant::load_model(model_dir);
  CHECK(at::equal(loaded->forward(batches[1]), logits));
  CHECK(
      at::equal(quant::load_model(io::Artifact::open(model_dir), {}, quant::InputQuantization::kOff)
                    ->forward(batches[1]),
                plain->forward(batches[1])));

  // The fake-quantized layer: its input quantized under the state's scale, which its export keeps.
  const auto& [name, q] = *state.layers.begin();
  quant::FakeQuantOptions options;
  options.activations = FpGrid::kNvfp4;
  options.name = name;
  const auto layer = quant::FakeQuantLinear::from_quantized(q, std::nullopt, options);
  const at::Tensor x = at::randn({3, q.in_features()}) * 4;
  CHECK(at::equal(layer->forward(x), at::linear(quant::fake_quantize_activations(
                                                    x, FpGrid::kNvfp4, q.input_global_scale),
                                                layer->effective_weight())));
  CHECK(at::equal(layer->to_quantized().input_global_scale, q.input_global_scale));
}

TEST_CASE("activation quant: ptq calibrates nvfp4 input scales on the weight-quantized model") {
  test::TempDir dir("activation_ptq");
  const auto model_dir = test::write_byte_level_model(dir);
  auto model = model::load_causal_lm(model_dir);
  quant::PtqOptions options;
  options.method = quant::PtqMethod::kRtn;
  options.spec = nvfp4_activation_spec();
  options.verbose = false;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor ids = at::randint(0, 256, {4, 12}, gen);
  std::ostringstream log;
  const quant::PtqResult result = quant::quantize_model(*model, ids, options, log);
  // The quantized model (dense dequantized weights, inputs not quantized) is what was observed.
  const auto expected = observed_input_max(*model, {ids}, options.spec);
  REQUIRE(result.layers.size() == expected.size());
  for (const auto& [name, max] : expected) {
    INFO(name);
    REQUIRE(result.layers.at(name).input_global_scale.defined());
    CHECK(result.layers.at(name).input_global_scale.item<float>() == 448.0f * 6.0f * (1.0f / max));
  }
  test::require_error([&] { quant::check_calibration_needs(options, /*has_calibration=*/false); },
                      {"--act-grid nvfp4", "--calib"});
}
