// A linear layer loaded from a GPTQ checkpoint. It keeps the checkpoint's packed tensors (qweight,
// qzeros, scales, g_idx, as stored, under their checkpoint names; on the host, where the loader
// maps them from the file without a copy) so that saving the model writes them back unchanged,
// and computes from:
//   packed (default)  the codes repacked once into the low-bit kernels' layout on the layer's
//                     device (ops/low_bit_weight.h; act-order columns reordered so that groups are
//                     contiguous): y = x W^T by ops::low_bit_matmul, never a full-precision weight.
//                     A forward that needs gradients (x requires grad: LoRA on a GPTQ base) runs
//                     the differentiable dense matmul of the weight dequantized for that call.
//   dequantize        (--dequantize; or 5-7 bits, or a g_idx whose groups are not runs of
//                     group_size columns) the float weight, dequantized once, as before.
#pragma once

#include <string>

#include <optional>

#include "model/linear.h"
#include "ops/low_bit_weight.h"
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
                   bool with_bias, const at::TensorOptions& options, bool dequantize = false);

  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return in_features_; }
  int64_t out_features() const override { return out_features_; }
  // The weight in the compute dtype (dequantized for the call when packed).
  at::Tensor effective_weight() const override;
  std::optional<at::Tensor> bias() const override;

  // The integer state the packed tensors stand for (codes, float32 scales, zero points, g_idx), on
  // the CPU: how QAT or a re-export picks up a GPTQ checkpoint.
  QuantizedWeight quantized_weight() const;
  int bits() const { return bits_; }
  GptqFormat format() const { return format_; }
  bool packed() const { return low_bit_.has_value(); }
  // Bytes the layer computes from: the kernel layout, or the dequantized weight.
  int64_t compute_bytes() const;

 private:
  std::string name_;
  int bits_;
  int64_t group_size_;
  GptqFormat format_;
  // Buffers, so that state_tensors() (and so save_causal_lm) lists them under checkpoint names.
  at::Tensor qweight_, qzeros_, scales_, g_idx_;
  int64_t in_features_, out_features_;
  at::ScalarType dtype_;
  at::Tensor bias_;    // parameter, (out) or undefined
  // What forward computes from (derived, not state: the checkpoint tensors are the state).
  std::optional<ops::LowBitWeight> low_bit_;
  at::Tensor weight_;  // (out, in) when dequantized
};

}  // namespace rqat::quant
