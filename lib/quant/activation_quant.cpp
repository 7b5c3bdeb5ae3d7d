// See activation_quant.h.
#include "quant/activation_quant.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "io/error.h"
#include "quant/capturing_linear.h"
#include "quant/quantized_weight.h"
#include "quant/straight_through.h"

namespace rqat::quant {

namespace {

thread_local int activation_quant_off_depth = 0;

}  // namespace

at::Tensor fake_quantize_activations(const at::Tensor& x, FpGrid grid,
                                     const at::Tensor& input_global_scale) {
  if (x.dim() < 1 || x.numel() == 0) return x;
  const int64_t features = x.size(-1);
  const int64_t block = grid == FpGrid::kFp8 ? features : fp_block_size(grid);
  if (features % block != 0)
    fail("{} activations: {} features are not whole blocks of {}", enum_name(grid), features,
         block);
  if (grid == FpGrid::kNvfp4 && !input_global_scale.defined())
    fail("nvfp4 activations need the input global scale from calibration");
  // (tokens, blocks, block): as compressed-tensors groups a token's features.
  const at::Tensor blocks = x.detach().to(at::kFloat).reshape({-1, features / block, block});
  const at::Tensor amax = blocks.abs().amax(-1, /*keepdim=*/true);
  const at::Tensor global =
      grid == FpGrid::kNvfp4 ? input_global_scale.to(blocks.device(), at::kFloat) : at::Tensor();
  const at::Tensor scales = fp_block_scales(amax, grid, global);
  const at::Tensor effective = grid == FpGrid::kNvfp4 ? scales / global : scales;
  const at::Tensor positive = effective > 0;
  const at::Tensor ratio = blocks / at::where(positive, effective, at::ones_like(effective));
  const at::Tensor values = at::where(positive, fp_round(ratio, grid), at::zeros_like(ratio));
  const at::Tensor quantized = (values * effective).reshape(x.sizes()).to(x.scalar_type());
  // As the weights' fake quantizer: a scale of 0 (an nvfp4 block too small for E4M3) holds only
  // 0 and passes no gradient.
  const at::Tensor in_range =
      at::logical_and(positive, ratio.abs() <= fp_largest_value(grid)).reshape(x.sizes());
  return straight_through(x, quantized, in_range);
}

InputQuantizer::InputQuantizer(FpGrid grid, std::string layer, int64_t in_features,
                               at::Tensor input_global_scale)
    : grid_(grid), layer_(std::move(layer)) {
  const int64_t block = fp_block_size(grid);
  if (block > 0 && in_features % block != 0)
    fail("{}: its {} inputs are not whole blocks of {} ({} activations)", layer_, in_features,
         block, enum_name(grid));
  if (input_global_scale.defined()) set_input_global_scale(input_global_scale);
}

void InputQuantizer::set_input_global_scale(const at::Tensor& scale) {
  if (grid_ != FpGrid::kNvfp4) return;         // only nvfp4's scales have a global part
  validate_input_global_scale(scale, layer_);  // once, not per forward
  global_ = scale.detach().reshape({1}).clone();
}

at::Tensor InputQuantizer::operator()(const at::Tensor& x) const {
  if (activation_quant_off_depth > 0) return x;
  if (needs_calibration())
    fail(
        "{}: nvfp4 activations need the layer's input global scale from calibration (ptq "
        "--act-grid nvfp4 --calib FILE records it; qat-sft/qat-kd calibrate on their data)",
        layer_);
  if (global_.defined() && global_.device() != x.device()) global_ = global_.to(x.device());
  return fake_quantize_activations(x, grid_, global_);
}

ActivationQuantOff::ActivationQuantOff() { ++activation_quant_off_depth; }
ActivationQuantOff::~ActivationQuantOff() { --activation_quant_off_depth; }

ActivationQuantLinear::ActivationQuantLinear(std::shared_ptr<model::Linear> inner,
                                             InputQuantizer quantizer)
    : WrappingLinear(std::move(inner)), quantizer_(std::move(quantizer)) {
  register_module("inner", inner_);
}

at::Tensor ActivationQuantLinear::forward(const at::Tensor& x) {
  return inner_->forward(quantizer_(x));
}

int64_t attach_activation_quant(model::CausalLM& model, const QuantSpec& spec,
                                const std::map<std::string, at::Tensor>& input_global_scales) {
  if (!spec.activations) return 0;
  int64_t wrapped = 0;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    const auto it = input_global_scales.find(slot.name);
    InputQuantizer quantizer(*spec.activations, slot.name, (*slot.layer)->in_features(),
                             it == input_global_scales.end() ? at::Tensor() : it->second);
    model.replace_linear(
        slot, std::make_shared<ActivationQuantLinear>(*slot.layer, std::move(quantizer)));
    ++wrapped;
  }
  return wrapped;
}

std::map<std::string, at::Tensor> calibrate_input_global_scales(
    model::CausalLM& model, const std::function<void()>& run_forwards) {
  struct Observed {
    InputQuantizer* quantizer;
    at::Tensor amax;  // on the inputs' device: no host read per batch
  };
  std::map<std::string, Observed> observed;
  std::vector<std::unique_ptr<ScopedCapture>> captures;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    auto* layer = dynamic_cast<QuantizesInput*>(slot.layer->get());
    InputQuantizer* quantizer = layer ? layer->input_quantizer() : nullptr;
    if (!quantizer || !quantizer->needs_calibration()) continue;
    Observed& o = observed[slot.name];
    o.quantizer = quantizer;
    captures.push_back(std::make_unique<ScopedCapture>(
        slot, [&o](const at::Tensor& x) { observe_input_amax(o.amax, x); }));
  }
  std::map<std::string, at::Tensor> scales;
  if (observed.empty()) return scales;
  {
    ActivationQuantOff off;
    at::NoGradGuard no_grad;
    run_forwards();
  }
  captures.clear();  // the layers back
  for (auto& [name, o] : observed) {
    const at::Tensor scale = input_global_scale_from_amax(o.amax, name);
    o.quantizer->set_input_global_scale(scale);
    scales.emplace(name, scale);
  }
  return scales;
}

void observe_input_amax(at::Tensor& amax, const at::Tensor& x) {
  if (x.numel() == 0) return;
  const at::Tensor m = x.detach().abs().amax().to(at::kFloat);
  amax = amax.defined() ? at::maximum(amax, m) : m;
}

at::Tensor input_global_scale_from_amax(const at::Tensor& amax, const std::string& layer) {
  // compressed-tensors' generate_gparam (quant/fp_grid.h); 1 where the layer saw nothing.
  float scale = 1.0f;
  if (amax.defined()) {
    const float max = amax.cpu().item<float>();
    if (!std::isfinite(max)) fail("{}: calibration saw NaN or infinite inputs", layer);
    scale = nvfp4_global_scale(max);
  }
  return at::full({1}, scale, at::kFloat);
}

std::vector<std::string> uncalibrated_input_layers(model::CausalLM& model) {
  std::vector<std::string> names;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    auto* layer = dynamic_cast<QuantizesInput*>(slot.layer->get());
    const InputQuantizer* quantizer = layer ? layer->input_quantizer() : nullptr;
    if (quantizer && quantizer->needs_calibration()) names.push_back(slot.name);
  }
  return names;
}

}  // namespace rqat::quant
