// See packed_gptq_linear.h.
#include "quant/packed_gptq_linear.h"

#include <ATen/ATen.h>

namespace rqat::quant {

PackedGptqLinear::PackedGptqLinear(const std::string& name, const quant::GptqPackedLayer& packed,
                                   int bits, int64_t group_size, quant::GptqFormat format,
                                   int64_t in_features, int64_t out_features, bool with_bias,
                                   const at::TensorOptions& options)
    : name_(name), bits_(bits), group_size_(group_size), format_(format) {
  // Unpacking validates every shape and range before anything is registered.
  const quant::QuantizedWeight unpacked =
      quant::unpack_gptq_layer(packed, bits, group_size, format, in_features, out_features, name);
  const c10::Device device = options.device();
  qweight_ = register_buffer("qweight", packed.qweight.to(device));
  qzeros_ = register_buffer("qzeros", packed.qzeros.to(device));
  scales_ = register_buffer("scales", packed.scales.to(device));
  // A checkpoint without g_idx gets the sequential one, so a re-save is complete.
  g_idx_ = register_buffer("g_idx", unpacked.g_idx.to(device));
  if (with_bias) bias_ = register_parameter("bias", at::empty({out_features}, options));
  weight_ = unpacked.dequantize().to(options);
}

at::Tensor PackedGptqLinear::forward(const at::Tensor& x) {
  return bias_.defined() ? at::linear(x, weight_, bias_) : at::linear(x, weight_);
}

std::optional<at::Tensor> PackedGptqLinear::bias() const {
  if (!bias_.defined()) return std::nullopt;
  return bias_;
}

quant::QuantizedWeight PackedGptqLinear::quantized_weight() const {
  return quant::unpack_gptq_layer({qweight_, qzeros_, scales_, g_idx_}, bits_, group_size_, format_,
                                  in_features(), out_features(), name_);
}

}  // namespace rqat::quant
