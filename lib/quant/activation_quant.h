// Activation quantization as GPU engines apply it to a linear layer's input (issue 46, item 2), so
// that a W8A8 or W4A4 model is trained and evaluated the way it will be served, with the scale
// rules of quant/fp_grid.h applied to x viewed as a (tokens, features) matrix:
//   fp8    FP8 W8A8 (compressed-tensors' FP8_DYNAMIC): a dynamic scale per token (row);
//   nvfp4  NVFP4 W4A4 (its NVFP4 scheme): E4M3 scales per block of 16, computed from each batch,
//          under a static FP32 global scale per layer, the checkpoint's input_global_scale:
//          448 * 6 / max|x| over calibration data (llm-compressor's static_minmax observer), so
//          every layer needs calibrating once (calibrate_input_global_scales);
//   mxfp4  MXFP4 W4A4 (its MXFP4 scheme): power-of-two scales per block of 32, from each batch.
// The backward pass is the clipped straight-through estimator, as for the weights: the gradient
// passes where x / scale lies within the grid's range (6, or 448). fp8's dynamic scale covers
// its token; MXFP4's power-of-two scale 2^(floor(log2 amax) - 2) leaves a block's largest values
// up to 8 scale steps, clipped to 6 (the OCP rule; compressed-tensors rounds the exponent up
// where that happens, see docs/deploy.md); under NVFP4's static global scale a block whose E4M3
// scale saturates at 448 clips values past the calibrated max.
// Device-side throughout: no host read per forward (a NaN reaches the loss, where the trainer
// stops on it).
#pragma once

#include <ATen/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/linear.h"
#include "quant/fp_grid.h"
#include "quant/quant_spec.h"

namespace rqat::quant {

// x (..., features) of any float dtype -> the same shape and dtype, quantized as above, computed
// in float32. nvfp4 needs `input_global_scale` (float32, one element); the others ignore it.
// features must be whole blocks (16 for nvfp4, 32 for mxfp4), as compressed-tensors requires.
at::Tensor fake_quantize_activations(const at::Tensor& x, FpGrid grid,
                                     const at::Tensor& input_global_scale = {});

// The input quantizer of one layer: its grid, and nvfp4's calibrated global scale (kept on the
// device of the inputs it last saw). Checks at construction that the layer's inputs are whole
// blocks; at a call, that an nvfp4 layer has been calibrated. Errors name the layer.
class InputQuantizer {
 public:
  InputQuantizer(FpGrid grid, std::string layer, int64_t in_features,
                 at::Tensor input_global_scale = {});
  at::Tensor operator()(const at::Tensor& x) const;
  FpGrid grid() const { return grid_; }
  // float32 {1}, or undefined (not nvfp4, or not calibrated yet).
  const at::Tensor& input_global_scale() const { return global_; }
  void set_input_global_scale(const at::Tensor& scale);
  bool needs_calibration() const { return grid_ == FpGrid::kNvfp4 && !global_.defined(); }

 private:
  FpGrid grid_;
  std::string layer_;
  mutable at::Tensor global_;
};

// A layer whose input is quantized (ActivationQuantLinear; FakeQuantLinear with activations).
class QuantizesInput {
 public:
  virtual ~QuantizesInput() = default;
  virtual InputQuantizer* input_quantizer() = 0;  // nullptr: this layer's input is not quantized
};

// While one lives, on this thread, layers pass their inputs through unquantized: calibration
// observes the inputs of the weight-quantized model.
class ActivationQuantOff {
 public:
  ActivationQuantOff();
  ~ActivationQuantOff();
  ActivationQuantOff(const ActivationQuantOff&) = delete;
  ActivationQuantOff& operator=(const ActivationQuantOff&) = delete;
};

// A linear layer whose input is quantized first (inference of an artifact made with
// --act-grid: its weights are dense, its activations quantized at every call).
class ActivationQuantLinear : public model::WrappingLinear, public QuantizesInput {
 public:
  ActivationQuantLinear(std::shared_ptr<model::Linear> inner, InputQuantizer quantizer);

  at::Tensor forward(const at::Tensor& x) override;
  InputQuantizer* input_quantizer() override { return &quantizer_; }

 private:
  InputQuantizer quantizer_;
};

// Wraps every layer `spec` quantizes in an ActivationQuantLinear when spec.activations is set,
// with its input global scale from `input_global_scales` (name -> float32 {1}; nvfp4 only) (after
// the weights are loaded: the wrapper's own parameter names differ). Returns how many.
int64_t attach_activation_quant(model::CausalLM& model, const QuantSpec& spec,
                                const std::map<std::string, at::Tensor>& input_global_scales);

// nvfp4's input global scales: with activation quantization off, observes max|x| of the input of
// every layer that needs calibration (InputQuantizer::needs_calibration) while `run_forwards`
// runs the model, then sets each layer's scale to 448 * 6 / that max (float32; a layer that saw
// only zeros gets 1). Returns the layers calibrated, name -> scale (empty when none needed it:
// `run_forwards` is then not called).
std::map<std::string, at::Tensor> calibrate_input_global_scales(
    model::CausalLM& model, const std::function<void()>& run_forwards);

// The pieces of that calibration, for passes that run the model their own way (ptq's block by
// block): the running max|x| of the inputs seen (device-side; undefined before the first), and
// the scale from it, 448 * 6 / max (as compressed-tensors' generate_gparam; 1 for no input or
// only zeros), float32 {1} on the CPU. Fails naming `layer` for NaN or infinite inputs.
void observe_input_amax(at::Tensor& amax, const at::Tensor& x);
at::Tensor input_global_scale_from_amax(const at::Tensor& amax, const std::string& layer);

// The layers whose input quantizer still needs calibrating (InputQuantizer::needs_calibration).
std::vector<std::string> uncalibrated_input_layers(model::CausalLM& model);

}  // namespace rqat::quant
