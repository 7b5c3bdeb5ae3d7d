// See nf4_linear.h.
#include "quant/nf4_linear.h"

#include <ATen/ATen.h>

#include "io/error.h"

namespace rqat::quant {

io::Json Nf4Options::to_json(const QuantSpec& selection) const {
  return {{"bits", kNf4Format.bits},
          {"group_size", block_size},
          {"format", "nf4"},
          {"double_quant", double_quant},
          {"include", selection.include},
          {"exclude", selection.exclude}};
}

Nf4Linear::Nf4Linear(Nf4Weight weight, std::optional<at::Tensor> bias)
    : weight_(std::move(weight)) {
  if (weight_.shape.size() != 2) fail("nf4 linear: the weight must be 2-D (out, in)");
  if (bias) bias_ = bias->detach().to(at::kFloat).clone();
}

std::shared_ptr<Nf4Linear> Nf4Linear::quantize(const at::Tensor& weight,
                                               const std::optional<at::Tensor>& bias,
                                               int64_t block_size, bool double_quant) {
  return std::make_shared<Nf4Linear>(nf4_quantize(weight, block_size, double_quant), bias);
}

at::Tensor Nf4Linear::forward(const at::Tensor& x) {
  const at::Tensor w = nf4_dequantize(weight_, x.scalar_type());
  return at::linear(x, w, bias_.defined() ? bias_.to(x.scalar_type()) : at::Tensor());
}

at::Tensor Nf4Linear::effective_weight() const { return nf4_dequantize(weight_, at::kFloat); }

std::optional<at::Tensor> Nf4Linear::bias() const {
  return bias_.defined() ? std::optional<at::Tensor>(bias_) : std::nullopt;
}

std::vector<std::pair<std::string, Nf4Weight>> attach_nf4(model::CausalLM& model,
                                                          const QuantSpec& spec, int64_t block_size,
                                                          bool double_quant) {
  at::NoGradGuard no_grad;
  std::vector<std::pair<std::string, Nf4Weight>> out;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    const auto& layer = *slot.layer;
    auto nf4 =
        Nf4Linear::quantize(layer->effective_weight(), layer->bias(), block_size, double_quant);
    out.emplace_back(slot.name, nf4->nf4());
    model.replace_linear(slot, nf4);
  }
  if (out.empty()) fail("--include selects no linear layer of the model");
  return out;
}

}  // namespace rqat::quant
