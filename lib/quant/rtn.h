// Round-to-nearest (RTN) weight quantization: every group of every row gets its own
// (scale, zero) from its own weights (min-max, or the clipping search of spec.clip_search), and
// every weight is rounded to the nearest code. The baseline of the PTQ methods and the last step
// of AWQ.
#pragma once

#include <ATen/Tensor.h>

#include <optional>

#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// weight: (out, in), any float dtype, any device (computed in float32; results on weight's
// device). g_idx[c] = c / group_size; the last group is smaller when group_size does not divide
// in. Throws rqat::Error for an invalid spec or non-finite weights.
// grid_importance: on a GGUF grid, an importance matrix's weights (in), making the result
// llama.cpp's importance-matrix quantization (quant/gguf/importance.h).
// nvfp4_global: on the nvfp4 grid, the global scale to use (fused layers share one:
// quant/fused_layers.h) instead of the weight's own.
QuantizedWeight rtn_quantize(const at::Tensor& weight, const QuantSpec& spec,
                             const at::Tensor& grid_importance = {},
                             std::optional<float> nvfp4_global = std::nullopt);

}  // namespace rqat::quant
