// The floating-point grids GPU engines serve (vLLM, SGLang; compressed-tensors checkpoints), by
// their definitions, as reference quantizers (issue 46, first part: the grids; the tools, the
// fake quantizer and the export come next):
//   nvfp4  FP4 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) in blocks of 16 along
//          a row, each block's scale an FP8 E4M3 number, over one FP32 global scale per tensor:
//          global = 448 * 6 / amax(w) (nvfp4_global_scale; shared by the layers engines fuse:
//          quant/fused_layers.h), scale_b = e4m3(amax_b / 6 * global),
//          code = e2m1(w / (scale_b / global)), w' = code * (scale_b / global).
//   mxfp4  E2M1 values in blocks of 32 with a power-of-two (E8M0) scale (OCP MX v1.0):
//          scale_b = 2^(floor(log2 amax_b) - 2), code = e2m1(w / scale_b), w' = code * scale_b.
//   fp8    FP8 E4M3 values with one FP32 scale per output row (FP8 W8A8's weights):
//          scale_r = max(amax_r / 448, FLT_EPSILON), code = e4m3(w / scale_r), w' = code * scale_r.
// Rounding is to nearest, ties to the even code, saturating at the largest value (6, 448);
// all-zero blocks get scale 0 (nvfp4), epsilon (fp8) or 2^-127 (mxfp4) and decode to zeros. A row
// whose length is not a multiple of the block has a shorter last block (compressed-tensors
// refuses such rows; its export will too). NaN, infinity and empty weights are refused. Exact
// (bit for bit against the definition) on the CPU; CUDA divides by a scalar through its
// reciprocal, which may differ in the last bit.
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include "io/enum_names.h"

namespace rqat::quant {

enum class FpGrid { kNvfp4, kMxfp4, kFp8, kCount };
constexpr EnumNames<FpGrid> enum_names(FpGrid) { return {"nvfp4", "mxfp4", "fp8"}; }

inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;

// Elementwise: the nearest E2M1 / E4M3 value (ties to the even code, saturating), as float32.
at::Tensor round_to_e2m1(const at::Tensor& x);
at::Tensor round_to_e4m3(const at::Tensor& x);

// The same on one value (GPTQ's column loop), and the element's code (quant/fp_grid_weight.h):
// E2M1 sign << 3 | magnitude index, or the E4M3 byte; -0 codes as +0.
inline float round_to_e2m1(float x) {
  const float a = std::fabs(x);
  const float v = a > 5.0f     ? 6.0f
                  : a >= 3.5f  ? 4.0f
                  : a > 2.5f   ? 3.0f
                  : a >= 1.75f ? 2.0f
                  : a > 1.25f  ? 1.5f
                  : a >= 0.75f ? 1.0f
                  : a > 0.25f  ? 0.5f
                               : 0.0f;
  return x < 0 ? -v : v;
}
inline float round_to_e4m3(float x) {
  return static_cast<float>(c10::Float8_e4m3fn(std::clamp(x, -kE4m3Max, kE4m3Max)));
}
inline uint8_t e2m1_code(float value) {
  const float a = std::fabs(value);
  const uint8_t index = a >= 6.0f   ? 7
                        : a >= 4.0f ? 6
                        : a >= 3.0f ? 5
                        : a >= 2.0f ? 4
                        : a >= 1.5f ? 3
                        : a >= 1.0f ? 2
                        : a >= 0.5f ? 1
                                    : 0;
  return value < 0 && index > 0 ? index | 8 : index;
}
inline uint8_t e4m3_code(float value) { return c10::Float8_e4m3fn(value == 0 ? 0.0f : value).x; }

struct FpQuantized {
  FpGrid grid = FpGrid::kNvfp4;
  at::Tensor codes;   // float32 (rows, cols): the element values on the E2M1 / E4M3 grid
  at::Tensor scales;  // float32 (rows, blocks per row): each exactly an E4M3 / E8M0 / FP32 value
  float global_scale = 1.0f;  // nvfp4's FP32 global scale (the others: 1)
  int64_t block = 16;         // values per scale along a row (fp8: the whole row)
};

// Quantizes a 2-D weight (rows, cols) onto `grid`; fails naming `where` for a non-finite or
// non-2-D weight.
inline float fp_round(float x, FpGrid grid) {
  return grid == FpGrid::kFp8 ? round_to_e4m3(x) : round_to_e2m1(x);
}
// The grid's largest element magnitude (6 for E2M1, 448 for E4M3): where rounding saturates.
inline float fp_largest_value(FpGrid grid) { return grid == FpGrid::kFp8 ? kE4m3Max : kE2m1Max; }
inline uint8_t fp_code(float value, FpGrid grid) {
  return grid == FpGrid::kFp8 ? e4m3_code(value) : e2m1_code(value);
}

// nvfp4's global scale is `global_scale` when given (shared by the layers an engine fuses:
// fp_grid_weight.h), else nvfp4_global_scale of the weight's own max.
FpQuantized fp_quantize(const at::Tensor& w, FpGrid grid, std::string_view where,
                        std::optional<float> global_scale = std::nullopt);
// NVFP4's global scale for a tensor whose largest magnitude is `amax`: 448 * 6 / amax, computed
// as compressed-tensors' generate_gparam evaluates it in PyTorch (2688 times the float32
// reciprocal of amax, amax at least float32's smallest normal), 1 for amax 0.
float nvfp4_global_scale(float amax);
// The elementwise nearest grid value of a tensor (E4M3 for fp8, else E2M1), float32.
at::Tensor fp_round(const at::Tensor& x, FpGrid grid);
// The block scales of the definitions above from each block's absolute maximum `amax` (any shape,
// float32): e4m3(amax / 6 * global) for nvfp4 (`global` a float32 tensor broadcastable to it, on
// its device), 2^(floor(log2 amax) - 2) (2^-127 for 0) for mxfp4, max(amax / 448, FLT_EPSILON) for
// fp8. Device-side: no host read (activation quantization calls it at every forward).
at::Tensor fp_block_scales(const at::Tensor& amax, FpGrid grid, const at::Tensor& global = {});
// The values per scale along a row: 16 (nvfp4), 32 (mxfp4), 0 for fp8 (the whole row).
int64_t fp_block_size(FpGrid grid);
// The weight the codes and scales stand for (float32, rows x cols).
at::Tensor fp_dequantize(const FpQuantized& q);

}  // namespace rqat::quant
