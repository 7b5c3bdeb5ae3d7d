// A linear layer loaded from a GPTQ checkpoint: it keeps the packed tensors (qweight, qzeros,
// scales, g_idx, as stored, under their checkpoint names) and dequantizes them once, when built,
// into the weight its forward uses. Saving the model writes the packed tensors back unchanged.
#pragma once

#include <string>

#include "model/linear.h"
#include "quant/gptq_packing.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

class PackedGptqLinear : public model::Linear {
 public:
  // Checks `packed` against the layer's shape (errors name `name`, the module name) and computes
  // the dequantized weight in float32 on the CPU, then converts it to `options` (dtype, device).
  // The bias, when with_bias, is allocated uninitialized: load_weights fills it like any other.
  PackedGptqLinear(const std::string& name, const GptqPackedLayer& packed, int bits,
                   int64_t group_size, GptqFormat format, int64_t in_features, int64_t out_features,
                   bool with_bias, const at::TensorOptions& options);

  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return weight_.size(1); }
  int64_t out_features() const override { return weight_.size(0); }
  at::Tensor effective_weight() const override { return weight_; }
  std::optional<at::Tensor> bias() const override;

  // The integer state the packed tensors stand for (codes, float32 scales, zero points, g_idx), on
  // the CPU: how QAT or a re-export picks up a GPTQ checkpoint.
  QuantizedWeight quantized_weight() const;
  int bits() const { return bits_; }
  GptqFormat format() const { return format_; }

 private:
  std::string name_;
  int bits_;
  int64_t group_size_;
  GptqFormat format_;
  // Buffers, so that state_tensors() (and so save_causal_lm) lists them under checkpoint names.
  at::Tensor qweight_, qzeros_, scales_, g_idx_;
  at::Tensor bias_;    // parameter, (out) or undefined
  at::Tensor weight_;  // derived (out, in), not a parameter: the packed tensors are the state
};

}  // namespace rqat::quant
