// See packed_gptq_linear.h.
#include "quant/packed_gptq_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/low_bit_matmul.h"
#include "ops/weight_formats.h"

namespace rqat::quant {
namespace {

// The kernel layout of `q`, or nullopt when the kernels cannot take it (bits without a kernel, or
// a g_idx whose groups are not runs of group_size columns once sorted).
std::optional<ops::LowBitWeight> kernel_layout(const QuantizedWeight& q, const std::string& name) {
  if (!ops::integer_bits_supported(q.bits)) return std::nullopt;
  const int64_t in = q.in_features();
  const int64_t group = q.group_size > 0 ? q.group_size : in;
  const at::Tensor g_idx = q.g_idx.to(at::kLong);
  const at::Tensor sequential = at::arange(in, at::kLong).div(group, "floor");
  if (at::equal(g_idx, sequential))
    return ops::pack_low_bit(q.codes, q.scales, q.zeros, q.bits, group, {}, name.c_str());
  // Act-order: sorting the columns by group must give runs of `group` columns, group 0 first.
  const at::Tensor order = std::get<1>(g_idx.sort(/*stable=*/true, 0, /*descending=*/false));
  if (!at::equal(g_idx.index_select(0, order), sequential)) return std::nullopt;
  return ops::pack_low_bit(q.codes.index_select(1, order), q.scales, q.zeros, q.bits, group, order,
                           name.c_str());
}

}  // namespace

PackedGptqLinear::PackedGptqLinear(const std::string& name, const quant::GptqPackedLayer& packed,
                                   int bits, int64_t group_size, quant::GptqFormat format,
                                   int64_t in_features, int64_t out_features, bool with_bias,
                                   const at::TensorOptions& options, bool dequantize)
    : name_(name),
      bits_(bits),
      group_size_(group_size),
      format_(format),
      in_features_(in_features),
      out_features_(out_features),
      dtype_(options.dtype().toScalarType()) {
  // Unpacking validates every shape and range before anything is registered.
  const quant::QuantizedWeight unpacked =
      quant::unpack_gptq_layer(packed, bits, group_size, format, in_features, out_features, name);
  if (!dequantize) low_bit_ = kernel_layout(unpacked, name);
  // Packed, the checkpoint tensors are only read to save the model again: they stay on the host.
  const c10::Device device = low_bit_ ? c10::Device(c10::kCPU) : options.device();
  qweight_ = register_buffer("qweight", packed.qweight.to(device));
  qzeros_ = register_buffer("qzeros", packed.qzeros.to(device));
  scales_ = register_buffer("scales", packed.scales.to(device));
  // A checkpoint without g_idx gets the sequential one, so a re-save is complete.
  g_idx_ = register_buffer("g_idx", unpacked.g_idx.to(device));
  if (with_bias) bias_ = register_parameter("bias", at::empty({out_features}, options));
  if (low_bit_)
    low_bit_ = low_bit_->to(options.device());
  else
    weight_ = unpacked.dequantize().to(options);
}

at::Tensor PackedGptqLinear::effective_weight() const {
  if (weight_.defined()) return weight_;
  return ops::dequantize_low_bit(*low_bit_).to(dtype_);
}

at::Tensor PackedGptqLinear::forward(const at::Tensor& x) {
  const bool differentiable = torch::GradMode::is_enabled() && x.requires_grad();
  if (weight_.defined() || differentiable) {
    const at::Tensor w = effective_weight();
    return bias_.defined() ? at::linear(x, w, bias_) : at::linear(x, w);
  }
  at::Tensor y = ops::low_bit_matmul(x, *low_bit_);
  return bias_.defined() ? y + bias_ : y;
}

std::optional<at::Tensor> PackedGptqLinear::bias() const {
  if (!bias_.defined()) return std::nullopt;
  return bias_;
}

int64_t PackedGptqLinear::compute_bytes() const {
  if (low_bit_) return low_bit_->bytes();
  return weight_.numel() * static_cast<int64_t>(weight_.element_size());
}

quant::QuantizedWeight PackedGptqLinear::quantized_weight() const {
  return quant::unpack_gptq_layer({qweight_.cpu(), qzeros_.cpu(), scales_.cpu(), g_idx_.cpu()},
                                  bits_, group_size_, format_, in_features(), out_features(),
                                  name_);
}

}  // namespace rqat::quant
