// Study A's other 8-bit path (rlquant train_model.py): a forward hook on every linear layer,
// lm_head included, that fake-quantizes the layer's *output* with a dynamic per-tensor scale
// (ops/dynamic_fake_quant.h). Which of its two 8-bit paths (this one, or module.py's weight STE
// that rqat's --mode qat follows) produced the paper's numbers is not certain (docs/grpo.md).
//
// OutputQuantLinear wraps any Linear (dense, fake-quantized, LoRA) and quantizes what it returns.
// It registers the wrapped layer's own parameters, buffers and submodules under their own names,
// so the model's parameter names, its optimizer state and its checkpoints are those of the
// unwrapped model. The scale of each call is taken over that call's whole output, so it depends on
// the batch a forward sees (rollout batches, micro-batches): the reference behaves the same way.
// A model tied to its embeddings has no lm_head layer; its logits are then not quantized.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/options.h"
#include "model/decoder.h"
#include "model/linear.h"
#include "ops/dynamic_fake_quant.h"

namespace rqat::quant {

struct OutputQuantOptions {
  int bits = 0;  // 0: off; else 2..8 (the study: 8)
  ops::ActivationQuantGrad grad = ops::ActivationQuantGrad::kReference;

  bool enabled() const { return bits != 0; }
  // bits 0 or 2..8; errors name --output-quant-bits.
  void validate() const;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.bits, "output-quant-bits",
            "Fake-quantize every linear layer's output, lm_head included, with a dynamic "
            "per-tensor scale (study A's hook; 0: off)");
    v.value(self.grad, "output-quant-grad",
            "Its gradient: reference (the hook's: only through the scale) or ste (straight "
            "through)");
  }
};

class OutputQuantLinear : public model::Linear {
 public:
  OutputQuantLinear(std::shared_ptr<model::Linear> inner, OutputQuantOptions options);

  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return inner_->in_features(); }
  int64_t out_features() const override { return inner_->out_features(); }
  at::Tensor effective_weight() const override { return inner_->effective_weight(); }
  std::optional<at::Tensor> bias() const override { return inner_->bias(); }

  const std::shared_ptr<model::Linear>& inner() const { return inner_; }

 private:
  std::shared_ptr<model::Linear> inner_;
  OutputQuantOptions options_;
};

// Wraps every linear layer of `model` (lm_head included) in an OutputQuantLinear; returns their
// names in model order. Does nothing when options are off.
std::vector<std::string> attach_output_quant(model::CausalLM& model,
                                             const OutputQuantOptions& options);
// Puts every wrapped layer back (before export: the artifact holds the trained weights).
void remove_output_quant(model::CausalLM& model);

}  // namespace rqat::quant
