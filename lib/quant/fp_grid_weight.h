// A layer on one of the GPU engines' floating-point grids (quant/fp_grid.h) as a QuantizedWeight,
// the form ptq, the fake quantizer, the quant state and the exporters share:
//   codes   uint8 (out, in): the element's own bit pattern: nvfp4/mxfp4 the 4-bit E2M1 code
//           (sign << 3 | magnitude index, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: the nibble
//           compressed-tensors packs), fp8 the float8_e4m3fn byte;
//   scales  float32 (out, groups): each block's stored scale (nvfp4 an E4M3 value, mxfp4 a power
//           of two, fp8 the row's FP32 scale, one group);
//   zeros   float32 zeros (the formats are symmetric);
//   super_scales  nvfp4: float32 {1}, the FP32 global scale; else undefined;
//   bits 4 or 8, group_size 16, 32 or -1 (the format's), g_idx contiguous, fp_grid set.
// dequantize() is value(code) * (scale / global) in float32 (global 1 but for nvfp4), the
// operations and order of fp_dequantize and of compressed-tensors' dequantization.
#pragma once

#include <ATen/Tensor.h>

#include <string>
#include <string_view>

#include "quant/fp_grid.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// The element values (float32) of codes (uint8) on `grid`, and back: values must lie on the grid
// (E2M1 / E4M3 values); -0 encodes as +0.
at::Tensor fp_code_values(const at::Tensor& codes, FpGrid grid);
at::Tensor fp_value_codes(const at::Tensor& values, FpGrid grid);

// The format's reference quantization of w (out, in) as a layer on the grid (fp_quantize, then
// encoded); fails naming `where` as fp_quantize does.
QuantizedWeight fp_grid_quantize(const at::Tensor& w, FpGrid grid, std::string_view where,
                                 std::optional<float> nvfp4_global = std::nullopt);
// A layer on the grid from fp_quantize's result, and back.
QuantizedWeight fp_grid_weight(const FpQuantized& q);
FpQuantized fp_quantized(const QuantizedWeight& w);

// The scale each block's values are multiplied by: scales / global (nvfp4), else scales, (out,
// groups) float32.
at::Tensor fp_effective_scales(const QuantizedWeight& w);

// The grid-specific checks of QuantizedWeight::validate (w.fp_grid set).
void validate_fp_grid(const QuantizedWeight& w, const std::string& name);

}  // namespace rqat::quant
