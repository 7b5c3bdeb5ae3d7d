// What a weight quantization is: bits, group size, symmetric or asymmetric, clipping search, and
// which linear layers it applies to. One QuantSpec is used by every tool (ptq, qat-*, grpo,
// eval-math) and written into every artifact's manifest, so a stage can tell exactly what the
// previous one did.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf_file.h"
#include "io/json_file.h"
#include "io/options.h"
#include "quant/fp_grid.h"

namespace rqat::quant {

// `--grid int4-w4a16`: the INT4 W4A16 scheme of compressed-tensors (W4, groups of 128, symmetric).
inline constexpr const char* kInt4W4a16Preset = "int4-w4a16";

struct QuantSpec {
  // The trainers' bits beyond the formats': their input's quant state (their default), or no
  // quantization. A spec that quantizes holds a width of ops/weight_formats.h.
  static constexpr int kBitsOfInput = 0;
  static constexpr int kFullPrecisionBits = 16;

  int bits = 4;              // 2, 3, 4 or 8 (the trainers: also kBitsOfInput, kFullPrecisionBits)
  int64_t group_size = 128;  // consecutive input columns sharing (scale, zero); -1: one per row
  bool symmetric = false;    // asymmetric (integer zero point) by default
  bool clip_search = false;  // shrink the range to minimize the weight's squared error (GPTQ mse)
  // One (scale, zero) for the whole weight, as study A's 8-bit quantization-aware RL. Stored like
  // per-channel parameters (one per row, all equal), so every layout, kernel and export that
  // reads per-channel parameters reads it as it is. Needs group_size -1.
  bool per_tensor = false;
  // Asymmetric zero points >= 1, so that the GPTQ v1 format (it stores zero - 1) can hold every
  // one: where the min-max rule gives zero 0 (a minimum within half a step of 0), the step
  // becomes max / (maxq - 1) with zero 1, a grid that still spans [min, max]. ptq and the
  // trainers set it before any work when they are to export v1.
  bool v1_zeros = false;
  // llama.cpp's grid of a GGUF block type instead of the uniform one (quant/gguf/grid.h): bits
  // and group size are then the type's (use_gguf_grid sets them), the scales those of llama.cpp's
  // reference quantizer, and the layers export to that GGUF type with no rounding error.
  std::optional<io::GgufType> gguf_grid = {};
  // A GPU engine's floating-point grid instead (quant/fp_grid.h: nvfp4, mxfp4, fp8): bits and
  // group size are the format's, symmetric, the scales the format's reference quantizer picks
  // (frozen), and the layers export to compressed-tensors with no rounding error.
  std::optional<FpGrid> fp_grid = {};
  // Activations quantized too, as the engines serve W8A8 and W4A4 (quant/activation_quant.h):
  // each quantized layer's input on this grid (fp8 per token, nvfp4/mxfp4 per block), in
  // training (straight through) and in evaluation.
  std::optional<FpGrid> activations = {};
  // Which linear layers are quantized, as ECMAScript regexes matched against the whole Hugging
  // Face module name (e.g. "model.layers.3.self_attn.q_proj"). A layer is quantized when it
  // matches some include pattern and no exclude pattern. Default: every linear layer inside the
  // decoder blocks; embeddings and lm_head stay in full precision.
  std::vector<std::string> include = {R"(model\.layers\.\d+\..*)"};
  std::vector<std::string> exclude = {};

  // The flags of a spec, declared once (io/options.h): ptq's, and the trainers' RTN start (the
  // GGUF grid is a flag of the tools, cli/quant_config.h, parsed from its own spelling).
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.bits, "bits",
            "Weight bits: 2, 3, 4 or 8; the trainers also take 16 (full precision) and 0 (their "
            "input's quant state)");
    v.value(self.group_size, "group-size",
            "Input columns per (scale, zero) group; -1: one per output channel (a smaller last "
            "group when it does not divide the layer's inputs)");
    v.value(self.symmetric, "sym", "Symmetric quantization (default: asymmetric)");
    v.value(self.clip_search, "clip", "Search a clipped range minimizing the weight error");
    v.value(self.per_tensor, "per-tensor", "One scale for the whole weight (with --group-size -1)");
    v.value(self.v1_zeros, "v1-zeros",
            "Asymmetric zero points >= 1, storable in GPTQ v1 (set by --export gptq)");
    v.value(self.activations, "act-grid",
            "Quantize each quantized layer's input too, as served: fp8 (W8A8, per-token scales), "
            "nvfp4 or mxfp4 (W4A4, per-block scales)");
    v.value(self.include, "include",
            "Regexes of module names to quantize (default: every linear in the blocks)");
    v.value(self.exclude, "exclude", "Regexes of module names kept in full precision");
  }

  // Puts the spec on `type`'s grid (bits and group size from it; symmetric and clip search off).
  void use_gguf_grid(io::GgufType type);
  // Puts the spec on a floating-point grid (bits and group size from it; symmetric).
  void use_fp_grid(FpGrid grid);
  // `--grid NAME`: gguf-<type>, nvfp4, mxfp4, fp8, or int4-w4a16 (the W4A16 preset GPU engines
  // serve: 4 bits, groups of 128, symmetric, on the uniform grid); fails naming `where` and the
  // known names.
  void use_grid(std::string_view name, std::string_view where);
  // The grid's name (gguf-q4_k, nvfp4), or nullopt on the uniform grid.
  std::optional<std::string> grid_name() const;

  int64_t max_code() const { return (int64_t{1} << bits) - 1; }
  // Number of groups along an input dimension of `in_features` (the last one may be smaller).
  int64_t num_groups(int64_t in_features) const;
  // Effective group size for `in_features` (group_size, or in_features when -1).
  int64_t effective_group_size(int64_t in_features) const;
  bool quantizes(std::string_view module_name) const;

  // Throws rqat::Error naming the field (prefixed by `where`, e.g. "--bits" or "quant.bits").
  void validate(std::string_view where = "") const;

  io::Json to_json() const;
  static QuantSpec from_json(const io::Json& json, std::string_view where);
  // "W4G128 asym", "W3 per-channel sym clip" ...
  std::string describe() const;
};

}  // namespace rqat::quant
