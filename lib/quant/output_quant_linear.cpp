// See output_quant_linear.h.
#include "quant/output_quant_linear.h"

#include "io/error.h"

namespace rqat::quant {

void OutputQuantOptions::validate() const {
  if (bits != 0 && (bits < 2 || bits > 8)) fail("--output-quant-bits = {}: 0 (off) or 2..8", bits);
}

OutputQuantLinear::OutputQuantLinear(std::shared_ptr<model::Linear> inner,
                                     OutputQuantOptions options)
    : inner_(std::move(inner)), options_(options) {
  options_.validate();
  // The inner layer's tensors under their own names: same state names as without the wrapper.
  for (const auto& item : inner_->named_parameters(/*recurse=*/false))
    register_parameter(item.key(), item.value(), item.value().requires_grad());
  for (const auto& item : inner_->named_buffers(/*recurse=*/false))
    register_buffer(item.key(), item.value());
  for (const auto& item : inner_->named_children()) register_module(item.key(), item.value());
}

at::Tensor OutputQuantLinear::forward(const at::Tensor& x) {
  return ops::fake_quantize_dynamic_per_tensor(inner_->forward(x), options_.bits, options_.grad);
}

std::vector<std::string> attach_output_quant(model::CausalLM& model,
                                             const OutputQuantOptions& options) {
  options.validate();
  std::vector<std::string> names;
  if (!options.enabled()) return names;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (std::dynamic_pointer_cast<OutputQuantLinear>(*slot.layer)) continue;
    model.replace_linear(slot, std::make_shared<OutputQuantLinear>(*slot.layer, options));
    names.push_back(slot.name);
  }
  return names;
}

void remove_output_quant(model::CausalLM& model) {
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true))
    if (auto wrapped = std::dynamic_pointer_cast<OutputQuantLinear>(*slot.layer))
      model.replace_linear(slot, wrapped->inner());
}

}  // namespace rqat::quant
