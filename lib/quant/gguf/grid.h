// llama.cpp's block types as quantization grids (QuantSpec::gguf_grid, `--grid gguf-q4_k`), so that
// ptq, qat-* and grpo choose and train codes on exactly the values llama.cpp will dequantize, and
// the GGUF export of such a layer has no rounding error at all.
//
// A layer on a grid is a QuantizedWeight whose groups are the type's sub-blocks (32 values for
// q8_0/q4_0/q4_1 and q4_k/q5_k, 16 for q2_k/q3_k/q6_k) with contiguous g_idx, in one of two forms:
//   zero form (q8_0, q4_0, q3_k, q6_k):  w = (code - zero) * scale,  as llama.cpp's d * (q - z)
//   min form  (q4_1, q2_k, q4_k, q5_k):  w = scale * code - min,     as llama.cpp's d * q - m
// where scale is the sub-block's float32 step exactly as llama.cpp computes it (fp16 d, or fp16 d
// times the integer sub-block scale) and, in min form, `zeros` holds the float32 min (dmin times
// the integer sub-block min; minus q4_1's m). Scales are >= 0: a negative llama.cpp step (q4_0's
// d, q3_k/q6_k's signed sub-scales) is stored as its magnitude with the codes mirrored (code ->
// maxq - code) and the zero point maxq - zero, which gives the same values; a step of 0 is a
// sub-block whose only value is 0 (or -min). The K-quants' fp16 super-block scales d (and dmin)
// are kept in QuantizedWeight::super_scales, so the blocks can be written back.
//
// Frozen grids: the scales, mins and super-block scales are those llama.cpp's reference quantizer
// picks (quant/gguf/quantize.h) for the initial weights; training and GPTQ choose the codes on
// them. The value of a code is computed by grid_value below (scalar) and grid_values (tensors),
// one formula each for every tool, in the order the gguf package evaluates it.
#pragma once

#include <ATen/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "io/gguf_file.h"
#include "ops/weight_formats.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// A block type's grid: its row of the format table (ops/weight_formats.h): bits per code,
// sub_block (the QuantizedWeight's group size), block (values per GGUF block), min_form, zero,
// super_scales.
using GgufGridInfo = ops::WeightFormat;

// Whether `type` is a block type with a grid (not f32, f16, bf16).
bool has_gguf_grid(io::GgufType type);
// The grid of a block type; fails naming `where` for f32/f16/bf16 (no grid).
GgufGridInfo gguf_grid_info(io::GgufType type, std::string_view where = "--grid");
// "gguf-q4_k" -> q4_k (the names of `--grid`); fails naming `where` and the known names.
io::GgufType parse_gguf_grid(std::string_view name, std::string_view where);
std::string gguf_grid_name(io::GgufType type);  // "gguf-q4_k"

// The code of x in a sub-block of the grid (nearest, clamped to [0, maxq]): zero form as the
// uniform quantizer (round(x / scale) + zero), min form as llama.cpp (round((x + min) / scale));
// a sub-block of step 0 takes the code of value 0 (zero form) or 0 (min form).
inline float grid_code(float x, float scale, float offset, float max_code, bool min_form) {
  if (!(scale > 0)) return min_form ? 0.0f : offset;
  const float raw =
      min_form ? std::nearbyint((x + offset) / scale) : std::nearbyint(x / scale) + offset;
  return std::min(std::max(raw, 0.0f), max_code);
}
inline float grid_value(float code, float scale, float offset, bool min_form) {
  return min_form ? scale * code - offset : (code - offset) * scale;
}
// The same on tensors of one shape (codes as floats): QuantizedWeight::dequantize and the fake
// quantizer's forward.
at::Tensor grid_values(const at::Tensor& codes, const at::Tensor& scales, const at::Tensor& offsets,
                       bool min_form);

// The grid-specific checks of QuantizedWeight::validate (w.gguf_grid set).
void validate_gguf_grid(const QuantizedWeight& w, const std::string& name);

}  // namespace rqat::quant
