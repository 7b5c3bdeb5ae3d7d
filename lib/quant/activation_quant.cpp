// See activation_quant.h.
#include "quant/activation_quant.h"

#include <ATen/ATen.h>

#include "io/error.h"

namespace rqat::quant {

at::Tensor fake_quantize_activations(const at::Tensor& x, FpGrid grid, std::string_view where) {
  if (x.dim() < 1 || x.numel() == 0) return x;
  const at::Tensor matrix = x.detach().reshape({-1, x.size(-1)});
  const at::Tensor quantized =
      fp_dequantize(fp_quantize(matrix, grid, where)).reshape(x.sizes()).to(x.scalar_type());
  // The quantized value, the gradient straight through.
  return quantized + (x - x.detach());
}

ActivationQuantLinear::ActivationQuantLinear(std::shared_ptr<model::Linear> inner, FpGrid grid,
                                             std::string name)
    : WrappingLinear(std::move(inner)), grid_(grid), name_(std::move(name)) {
  register_module("inner", inner_);
}

at::Tensor ActivationQuantLinear::forward(const at::Tensor& x) {
  return inner_->forward(fake_quantize_activations(x, grid_, name_));
}

int64_t attach_activation_quant(model::CausalLM& model, const QuantSpec& spec) {
  if (!spec.activations) return 0;
  int64_t wrapped = 0;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    model.replace_linear(
        slot, std::make_shared<ActivationQuantLinear>(*slot.layer, *spec.activations, slot.name));
    ++wrapped;
  }
  return wrapped;
}

}  // namespace rqat::quant
