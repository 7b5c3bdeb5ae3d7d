// NF4, QLoRA's 4-bit NormalFloat (Dettmers et al. 2023, and bitsandbytes' quant_type "nf4"): 16
// levels at quantiles of a standard normal, rescaled to [-1, 1] with an exact 0, for weights that
// are roughly normal. The weight is cut into blocks of `block_size` consecutive elements
// (row-major, the last block possibly shorter); each block is divided by its absmax and every value
// becomes the index of its nearest level. Dequantized: level[code] * absmax.
//
// Storage as bitsandbytes keeps it: two codes per byte, the first element in the high nibble,
// absmax in float32 (one per block), or, with double quantization (QLoRA's, bitsandbytes'
// compress_statistics), absmax itself quantized: offset = mean(absmax), then (absmax - offset) in
// blocks of 256 to the nearest of the 256 values of bitsandbytes' signed dynamic 8-bit map, times
// each block's float32 absmax. The 4-bit codes are chosen with the exact absmax; dequantization
// uses the decoded one: level[code] * (map[q] * nested_absmax + offset).
#pragma once

#include <ATen/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

#include "ops/weight_formats.h"

namespace rqat::quant {

// The published NF4 levels (QLoRA, appendix E; bitsandbytes' NF4 table), ascending; index 7 is 0.
inline constexpr std::array<float, 16> kNf4Levels = {-1.0f,
                                                     -0.6961928009986877f,
                                                     -0.5250730514526367f,
                                                     -0.39491748809814453f,
                                                     -0.28444138169288635f,
                                                     -0.18477343022823334f,
                                                     -0.09105003625154495f,
                                                     0.0f,
                                                     0.07958029955625534f,
                                                     0.16093020141124725f,
                                                     0.24611230194568634f,
                                                     0.33791524171829224f,
                                                     0.44070982933044434f,
                                                     0.5626170039176941f,
                                                     0.7229568362236023f,
                                                     1.0f};

inline constexpr int64_t kNf4NestedBlockSize = 256;
// The NF4 row of ops/weight_formats.h: 4-bit codes, QLoRA's default block of 64.
inline constexpr const ops::WeightFormat& kNf4Format = *ops::weight_format("nf4");

struct Nf4Weight {
  at::Tensor packed;  // uint8 (ceil(numel / 2)): codes 2i (high nibble) and 2i+1 (low nibble)
  // float32 (ceil(numel / block_size)): each block's scale as dequantization uses it: max |w|, or
  // its double-quantized value.
  at::Tensor absmax;
  std::vector<int64_t> shape;
  int64_t block_size = kNf4Format.sub_block;
  // Double quantization: absmax's 8-bit codes, the float32 absmax of each of their blocks of 256,
  // and the offset; undefined / 0 without it.
  bool double_quant = false;
  at::Tensor absmax_codes;   // uint8 (ceil(numel / block_size))
  at::Tensor nested_absmax;  // float32 (ceil(absmax_codes / 256))
  float offset = 0;
};

// bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True), Dettmers 2015's dynamic
// tree quantization): for i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i-6),
// with both signs, plus 0 and 1; ascending, 256 values. Built with the same float32 operations.
const std::array<float, 256>& dynamic_map_signed();

// w: any shape, any float dtype, finite (computed in float32 on w's device). A value exactly
// between two levels takes the lower one; an all-zero block has absmax 0 and decodes to zeros.
// Throws rqat::Error for block_size < 2 or odd, an empty or non-finite w.
Nf4Weight nf4_quantize(const at::Tensor& w, int64_t block_size = kNf4Format.sub_block,
                       bool double_quant = false);

// The codes, one uint8 in [0, 16) per element, in w's shape.
at::Tensor nf4_codes(const Nf4Weight& q);

// level[code] * absmax in `dtype` (float32 arithmetic), in w's shape.
at::Tensor nf4_dequantize(const Nf4Weight& q, at::ScalarType dtype = at::kFloat);

}  // namespace rqat::quant
