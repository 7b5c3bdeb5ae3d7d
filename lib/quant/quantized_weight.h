// The quantized state of one linear layer, as it flows from ptq into QAT, evaluation and export:
// integer codes, per-group scales and zero points, and the group of every input column (g_idx,
// which act-order makes non-monotonic). The weight it stands for is
//   W[r, c] = (codes[r, c] - zeros[r, g_idx[c]]) * scales[r, g_idx[c]].
// A layer on one of llama.cpp's grids (gguf_grid set; quant/gguf/grid.h) has the type's sub-blocks
// as groups and, for the types with mins, W[r, c] = scales[r, g] * codes[r, c] - zeros[r, g]. One
// on a floating-point grid (fp_grid set; quant/fp_grid_weight.h) has W[r, c] = value(codes[r, c])
// * scales[r, g] / global.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "io/gguf_file.h"
#include "quant/fp_grid.h"

namespace rqat::quant {

struct QuantizedWeight {
  at::Tensor codes;   // (out, in) uint8, each in [0, 2^bits - 1]
  at::Tensor scales;  // (out, groups) float32, > 0
  at::Tensor zeros;   // (out, groups) float32, integral, in [0, 2^bits - 1]
  at::Tensor g_idx;   // (in) int32, group of each input column
  int bits = 4;
  int64_t group_size = 128;  // as in the QuantSpec (-1: per channel)
  // On a GGUF grid: the block type; zeros then hold mins for the types with mins, scales may be
  // 0, and the K-quants' fp16 super-block scales (d, dmin) are super_scales (out, in / 256, 2).
  std::optional<io::GgufType> gguf_grid;
  at::Tensor super_scales;
  // On a GPU engine's floating-point grid (quant/fp_grid_weight.h): codes are the elements' bit
  // patterns (E2M1 nibbles, E4M3 bytes), zeros 0, and nvfp4's global scale is super_scales {1}.
  std::optional<FpGrid> fp_grid;
  // Not the weight's: the layer's input global scale under NVFP4 activations (QuantSpec::
  // activations, quant/activation_quant.h), float32 {1} from calibration; undefined otherwise.
  // It travels with the layer (quant state, fake quantizer, compressed-tensors export).
  at::Tensor input_global_scale;

  // On a grid of its own (GGUF or floating point): its scales are what the format stores, not
  // rounded to GPTQ checkpoints' fp16.
  bool on_format_grid() const { return gguf_grid.has_value() || fp_grid.has_value(); }

  int64_t out_features() const { return codes.size(0); }
  int64_t in_features() const { return codes.size(1); }
  // The float32 (out, in) weight the codes stand for.
  at::Tensor dequantize() const;
  // Throws rqat::Error (naming `name`) when shapes, dtypes or ranges are inconsistent.
  void validate(const std::string& name) const;
};

// NVFP4 activations' input global scale: one positive finite float32 value; fails naming `where`.
void validate_input_global_scale(const at::Tensor& scale, const std::string& where);

}  // namespace rqat::quant
