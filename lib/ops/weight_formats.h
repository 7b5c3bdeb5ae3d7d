// rqat's weight formats in one table, as ggml keeps one table of its types: every grid a weight
// may be quantized to, one row each, with what the checks, packers, kernels and exporters need to
// know of it:
//   uniform  int2 ... int8: codes 0 .. 2^bits - 1, w = (code - zero) * scale, any group size
//            (or per channel); the packed CPU/CUDA kernels, GPTQ checkpoints and the fake
//            quantizer take these widths.
//   gguf     llama.cpp's block types on their own grids (quant/gguf/grid.h): fixed sub-blocks of
//            one scale, blocks of one record, a zero form (code - zero) * scale or a min form
//            scale * code - min, fp16 super-block scales for the K-quants; exact GGUF export.
//   nf4      QLoRA's NormalFloat levels (quant/nf4.h), one absmax per block; bitsandbytes export.
//   float    the GPU engines' floating-point grids (quant/fp_grid.h): nvfp4 (E2M1 values, an E4M3
//            scale per 16 and an FP32 global scale), mxfp4 (E2M1, an E8M0 scale per 32), fp8
//            (E4M3 values, an FP32 scale per output row). Quantizers only so far (issue 46).
// Every width check (QuantSpec, the packers, GPTQ configs, the fake quantizer), every grid name
// (`--grid`, manifests) and every grid's parameters (gguf_grid_info) are read from here, and the
// errors list the choices from it. A new format is one row plus its kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf_file.h"

namespace rqat::ops {

enum class WeightGrid { kUniform, kGguf, kNf4, kFloat };

struct WeightFormat {
  std::string_view name;  // as `--grid` and manifests spell it ("int4", "gguf-q4_k", "nf4")
  WeightGrid grid = WeightGrid::kUniform;
  int bits = 4;  // bits per code
  // Values per scale: the format's own (a GGUF type's sub-block, NVFP4's 16, MXFP4's 32; NF4's
  // default block, which a flag may change), or 0: any group size the spec asks (uniform) or
  // one scale per output row (fp8).
  int64_t sub_block = 0;
  int64_t block = 0;          // values per stored block (GGUF: 256 for the K-quants); 0: none
  bool min_form = false;      // w = scale * code - min; else (code - zero) * scale
  int zero = 0;               // zero form with a fixed zero point (GGUF: q8_0 128, q4_0 8, ...)
  bool super_scales = false;  // fp16 super-block scales d (and dmin) per block (K-quants)
  std::optional<io::GgufType> gguf_type = std::nullopt;  // the GGUF type it exports to exactly

  // Integer codes 0 .. max_code (uniform, GGUF, NF4's 16 levels); a float grid's codes are its
  // element values instead.
  constexpr int64_t max_code() const { return (int64_t{1} << bits) - 1; }
};

inline constexpr WeightFormat kWeightFormats[] = {
    {.name = "int2", .bits = 2},
    {.name = "int3", .bits = 3},
    {.name = "int4", .bits = 4},
    {.name = "int8", .bits = 8},
    {"gguf-q8_0", WeightGrid::kGguf, 8, 32, 32, false, 128, false, io::GgufType::kQ8_0},
    {"gguf-q4_0", WeightGrid::kGguf, 4, 32, 32, false, 8, false, io::GgufType::kQ4_0},
    {"gguf-q4_1", WeightGrid::kGguf, 4, 32, 32, true, 0, false, io::GgufType::kQ4_1},
    {"gguf-q2_k", WeightGrid::kGguf, 2, 16, 256, true, 0, true, io::GgufType::kQ2_K},
    {"gguf-q3_k", WeightGrid::kGguf, 3, 16, 256, false, 4, true, io::GgufType::kQ3_K},
    {"gguf-q4_k", WeightGrid::kGguf, 4, 32, 256, true, 0, true, io::GgufType::kQ4_K},
    {"gguf-q5_k", WeightGrid::kGguf, 5, 32, 256, true, 0, true, io::GgufType::kQ5_K},
    {"gguf-q6_k", WeightGrid::kGguf, 6, 16, 256, false, 32, true, io::GgufType::kQ6_K},
    {.name = "nf4", .grid = WeightGrid::kNf4, .bits = 4, .sub_block = 64},
    {.name = "nvfp4", .grid = WeightGrid::kFloat, .bits = 4, .sub_block = 16},
    {.name = "mxfp4", .grid = WeightGrid::kFloat, .bits = 4, .sub_block = 32},
    {.name = "fp8", .grid = WeightGrid::kFloat, .bits = 8},  // one scale per output row
};

// The row named `name`, or nullptr.
constexpr const WeightFormat* weight_format(std::string_view name) {
  for (const auto& format : kWeightFormats)
    if (format.name == name) return &format;
  return nullptr;
}

// The uniform row of `bits`, or nullptr when no uniform format has that width.
constexpr const WeightFormat* integer_weight_format(int bits) {
  for (const auto& format : kWeightFormats)
    if (format.grid == WeightGrid::kUniform && format.bits == bits) return &format;
  return nullptr;
}

constexpr bool integer_bits_supported(int bits) { return integer_weight_format(bits) != nullptr; }

// The row of GGUF type `type` on its own grid, or nullptr (f32, f16, bf16 have none).
constexpr const WeightFormat* gguf_weight_format(io::GgufType type) {
  for (const auto& format : kWeightFormats)
    if (format.grid == WeightGrid::kGguf && format.gguf_type == type) return &format;
  return nullptr;
}

// "a, b or c" (or_last) / "a, b, c": the rows' names or widths in table order, for messages.
template <class Pick>
std::string list_weight_formats(WeightGrid grid, Pick pick, bool or_last) {
  std::vector<std::string> items;
  for (const auto& format : kWeightFormats)
    if (format.grid == grid) items.push_back(pick(format));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += or_last && i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}

// "2, 3, 4 or 8": the uniform widths, for error messages.
inline std::string integer_bits_choices() {
  return list_weight_formats(
      WeightGrid::kUniform, [](const WeightFormat& f) { return std::to_string(f.bits); }, true);
}

// "gguf-q8_0, gguf-q4_0, ...": the names of the rows of `grid`.
inline std::string weight_format_names(WeightGrid grid) {
  return list_weight_formats(
      grid, [](const WeightFormat& f) { return std::string(f.name); }, false);
}

}  // namespace rqat::ops
