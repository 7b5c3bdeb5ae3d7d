// See quantized_weight.h. dequantize() is the single definition of what the codes mean: GPTQ and
// RTN compute their output weights with the same float32 operations in the same order
// ((code - zero) * scale), so their results equal dequantize() bit for bit.
#include "quant/quantized_weight.h"

#include <ATen/ATen.h>

#include <cmath>

#include "io/error.h"
#include "ops/weight_formats.h"
#include "quant/fp_grid_weight.h"
#include "quant/gguf/grid.h"

namespace rqat::quant {

at::Tensor QuantizedWeight::dequantize() const {
  if (fp_grid)
    return fp_code_values(codes, *fp_grid) *
           fp_effective_scales(*this).index_select(1, g_idx.to(at::kLong));
  auto z = zeros.index_select(1, g_idx.to(at::kLong));
  auto s = scales.index_select(1, g_idx.to(at::kLong));
  const bool min_form = gguf_grid && gguf_grid_info(*gguf_grid).min_form;
  return grid_values(codes.to(at::kFloat), s, z, min_form);
}

void QuantizedWeight::validate(const std::string& name) const {
  if (gguf_grid && fp_grid)
    fail("{}: a layer is on a GGUF grid or a floating-point one, not both", name);
  if (fp_grid) {
    if (bits != 4 && bits != 8)
      fail("{}: bits = {} (a floating-point grid has 4 or 8)", name, bits);
  } else if (gguf_grid) {
    if (bits < 2 || bits > 8) fail("{}: bits = {} (a GGUF grid has 2 to 8)", name, bits);
  } else if (!ops::integer_bits_supported(bits)) {
    fail("{}: bits = {} (supported: {})", name, bits, ops::integer_bits_choices());
  }
  if (group_size != -1 && group_size < 1)
    fail("{}: group_size = {} (must be -1 or positive)", name, group_size);
  if (input_global_scale.defined()) validate_input_global_scale(input_global_scale, name);
  if (!codes.defined() || codes.dim() != 2 || codes.scalar_type() != at::kByte)
    fail("{}: codes must be a 2-D uint8 tensor (out, in)", name);
  const int64_t out = codes.size(0), in = codes.size(1);
  if (!g_idx.defined() || g_idx.dim() != 1 || g_idx.size(0) != in ||
      g_idx.scalar_type() != at::kInt)
    fail("{}: g_idx must be an int32 tensor of {} entries (one per input column)", name, in);
  if (!scales.defined() || scales.dim() != 2 || scales.size(0) != out ||
      scales.scalar_type() != at::kFloat)
    fail("{}: scales must be a float32 tensor ({}, groups)", name, out);
  const int64_t groups = scales.size(1);
  const int64_t expected_groups = group_size == -1 ? 1 : (in + group_size - 1) / group_size;
  if (groups != expected_groups)
    fail("{}: scales have {} groups, but {} inputs in groups of {} make {}", name, groups, in,
         group_size, expected_groups);
  if (!zeros.defined() || zeros.sizes() != scales.sizes() || zeros.scalar_type() != at::kFloat)
    fail("{}: zeros must be a float32 tensor ({}, {}) like scales", name, out, groups);
  for (const at::Tensor* t : {&scales, &zeros, &g_idx}) {
    if (t->device() != codes.device())
      fail("{}: codes, scales, zeros and g_idx must share a device", name);
  }
  const int64_t max_code = (int64_t{1} << bits) - 1;
  if (in > 0 && (g_idx.min().item<int64_t>() < 0 || g_idx.max().item<int64_t>() >= groups))
    fail("{}: g_idx has entries outside [0, {})", name, groups);
  if (codes.numel() > 0 && codes.max().item<int64_t>() > max_code)
    fail("{}: codes exceed {} (the largest {}-bit code)", name, max_code, bits);
  if (gguf_grid) return validate_gguf_grid(*this, name);
  if (fp_grid) return validate_fp_grid(*this, name);
  if (scales.numel() > 0) {
    if (!(scales > 0).all().item<bool>() || !at::isfinite(scales).all().item<bool>())
      fail("{}: scales must be finite and > 0", name);
    if (!at::equal(zeros, at::round(zeros)) || zeros.min().item<double>() < 0 ||
        zeros.max().item<double>() > static_cast<double>(max_code))
      fail("{}: zeros must be integers in [0, {}]", name, max_code);
  }
}

void validate_input_global_scale(const at::Tensor& scale, const std::string& where) {
  const bool one_float = scale.defined() && scale.numel() == 1 && scale.scalar_type() == at::kFloat;
  const float value = one_float ? scale.cpu().item<float>() : 0.0f;
  if (!one_float || !std::isfinite(value) || !(value > 0))
    fail("{}: the input global scale must be one positive finite float32 value", where);
}

}  // namespace rqat::quant
