// Activation quantization as GPU engines apply it to a linear layer's input (issue 46, item 2), so
// that a W8A8 or W4A4 model is trained and evaluated the way it will be served:
//   fp8    FP8 W8A8's dynamic per-token scales: each row of the last dimension (a token's
//          activations) gets s = max(amax / 448, eps) and x' = e4m3(x / s) * s;
//   nvfp4  NVFP4 W4A4: blocks of 16 along the last dimension with E4M3 scales under an FP32
//          global scale 448 * 6 / amax(x), x' = e2m1(x / (s_b / global)) * (s_b / global);
//   mxfp4  MXFP4 W4A4: blocks of 32 with power-of-two scales;
// each exactly fp_quantize / fp_dequantize (quant/fp_grid.h) of x as a (tokens, features) matrix.
// The backward pass is the straight-through estimator (identity): dynamic scales cover every
// value, so none is clipped. Deviation from serving: vLLM's NVFP4 W4A4 takes the global scale from
// calibration (a static input_global_scale), here from the batch itself.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string_view>

#include "model/decoder.h"
#include "model/linear.h"
#include "quant/fp_grid.h"
#include "quant/quant_spec.h"

namespace rqat::quant {

// x (..., features) of any float dtype -> the same shape and dtype, quantized as above; fails
// naming `where` for NaN or infinite activations.
at::Tensor fake_quantize_activations(const at::Tensor& x, FpGrid grid, std::string_view where);

// A linear layer whose input is quantized first (inference of an artifact made with
// --act-grid: its weights are dense, its activations quantized at every call).
class ActivationQuantLinear : public model::WrappingLinear {
 public:
  ActivationQuantLinear(std::shared_ptr<model::Linear> inner, FpGrid grid, std::string name);

  at::Tensor forward(const at::Tensor& x) override;

 private:
  FpGrid grid_;
  std::string name_;
};

// Wraps every layer `spec` quantizes in an ActivationQuantLinear when spec.activations is set
// (after the weights are loaded: the wrapper's own parameter names differ). Returns how many.
int64_t attach_activation_quant(model::CausalLM& model, const QuantSpec& spec);

}  // namespace rqat::quant
