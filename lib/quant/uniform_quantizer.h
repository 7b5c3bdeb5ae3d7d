// Uniform (integer grid) weight quantization with the conventions of the GPTQ reference quantizer,
// so that codes, scales and zeros mean the same as in GPTQModel/transformers checkpoints:
//   asymmetric: xmin = min(w, 0), xmax = max(w, 0) over a row of the group (the range always holds
//               0); scale = (xmax - xmin) / maxq, zero = round(-xmin / scale)
//   symmetric:  a = max(|xmin|, xmax); scale = 2a / maxq, zero = (maxq + 1) / 2
//   an all-zero row uses xmin = -1, xmax = 1 (any positive scale represents it exactly)
//   QuantSpec::v1_zeros, asymmetric: a zero of 0 becomes 1 with scale = xmax / (maxq - 1)
//   code = clamp(round(w / scale) + zero, 0, maxq), w' = (code - zero) * scale
// with maxq = 2^bits - 1, float32 arithmetic and round half to even (like torch.round).
// One deliberate difference from the reference: it computes a symmetric row whose weights are all
// >= 0 with scale = xmax / maxq (a quirk that clips half of that row's range); here every
// symmetric row uses 2a / maxq as above.
//
// Groups: group g covers input columns [g * group_size, (g + 1) * group_size); when group_size
// does not divide in_features the last group is smaller (ceil(in / group_size) groups). GPTQ with
// act-order forms its groups in a permuted order and records them in g_idx.
#pragma once

#include <ATen/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "quant/quant_spec.h"

namespace rqat::quant {

// Clipping search (QuantSpec::clip_search), as the `mse` option of the GPTQ reference quantizer:
// try the ranges p * [xmin, xmax] for p = 1 - i / kClipGrid, i = 0 .. kClipSteps - 1 (p from 1 down
// to 0.21, i.e. shrinking by at most kClipMaxShrink), and keep per row the (scale, zero) whose
// quantization error sum |w' - w|^kClipNorm is smallest (ties keep the wider range). The norm 2.4
// (not 2) is the reference's choice: it weighs large errors of clipped outliers a bit more than
// the squared error would.
inline constexpr int kClipGrid = 100;
inline constexpr double kClipMaxShrink = 0.8;
inline constexpr int kClipSteps = 80;  // int(kClipMaxShrink * kClipGrid)
inline constexpr double kClipNorm = 2.4;

struct RowParams {
  at::Tensor scales;  // (rows) float32, > 0
  at::Tensor zeros;   // (rows) float32, integral, in [0, maxq]
};

// (scale, zero) of every row of `block` (rows, k), k >= 1, any float dtype (computed in float32),
// under spec.bits / spec.symmetric / spec.clip_search / spec.v1_zeros. The group size of `spec`
// is not used: the caller passes the columns of one group. spec.per_tensor: one (scale, zero)
// over the whole block, the same rule applied to all its values, repeated for every row.
RowParams find_row_params(const at::Tensor& block, const QuantSpec& spec);

// Integer codes (uint8) of `weight` (out, in) for per-group scales and zeros (out, groups) and
// the group of every column, g_idx (in) int32.
at::Tensor quantize_to_codes(const at::Tensor& weight, const at::Tensor& scales,
                             const at::Tensor& zeros, const at::Tensor& g_idx, int bits);

// g_idx of contiguous groups: column c belongs to group c / group_size (0 for group_size -1).
at::Tensor contiguous_group_index(int64_t in_features, int64_t group_size);

// The code of one element (as a float), by the rule of the header comment; the GPTQ inner loop
// uses it. nearbyint rounds half to even in the default rounding mode, as torch.round does.
// std::min/max (not fmin/fmax, library calls here): the weights are checked to be finite.
inline float quantize_code(float w, float scale, float zero, float max_code) {
  return std::min(std::max(std::nearbyint(w / scale) + zero, 0.0f), max_code);
}

}  // namespace rqat::quant
