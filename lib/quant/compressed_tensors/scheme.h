// compressed-tensors, the checkpoint format of llm-compressor that vLLM and SGLang serve: which of
// its schemes a layer of rqat's maps onto exactly, and config.json's "quantization_config" for it,
// as compressed-tensors 0.20 writes it (ModelCompressor.update_config):
//   nvfp4  format "nvfp4-pack-quantized": float, 4 bits, strategy "tensor_group", groups of 16,
//          scale_dtype float8_e4m3fn (the NVFP4A16 preset's weights)
//   mxfp4  format "mxfp4-pack-quantized": float, 4 bits, strategy "group", groups of 32,
//          scale_dtype uint8 (E8M0; the MXFP4A16 preset's weights)
//   fp8    format "float-quantized": float, 8 bits, strategy "channel" (FP8_DYNAMIC's weights)
//   int    format "pack-quantized": int, 2 to 8 bits, strategy "group" (groups of group_size) or
//          "channel" (group_size -1), symmetric or not (W4A16, W8A16, W4A16_ASYM)
// Input activations, when the model quantizes them (QuantSpec::activations), as the presets
// describe them: fp8 "token" dynamic (FP8_DYNAMIC's), nvfp4 "tensor_group" of 16 with dynamic
// "local" block scales under each layer's static NAME.input_global_scale (NVFP4's), mxfp4 "group"
// of 32 dynamic (MXFP4's); with any weight scheme (e.g. W4A16 weights with FP8 activations). A
// checkpoint whose activations are quantized in another way imports its weights only
// (CtConfig::unread_activations says how).
// The tensors of each layer are quant/compressed_tensors/tensors.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/enum_names.h"
#include "io/json_file.h"
#include "quant/fp_grid.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

enum class CtFormat {
  kPackQuantized,
  kNvfp4PackQuantized,
  kMxfp4PackQuantized,
  kFloatQuantized,
  kCount
};
constexpr EnumNames<CtFormat> enum_names(CtFormat) {
  return {"pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized", "float-quantized"};
}

// The version of compressed-tensors whose format this follows (written as the config's "version").
inline constexpr const char* kCompressedTensorsVersion = "0.20.1";

struct CtScheme {
  CtFormat format = CtFormat::kPackQuantized;
  int bits = 4;
  int64_t group_size = 128;  // -1: one scale per output channel
  bool symmetric = true;
  std::optional<FpGrid> activations;  // the input activations' grid, nullopt: not quantized

  // The floating-point grid of the float formats (nvfp4, mxfp4, fp8), nullopt for int.
  std::optional<FpGrid> fp_grid() const;
  // "group", "channel" or "tensor_group".
  std::string_view strategy() const;
  // "W4A16 G128 sym (pack-quantized)", "NVFP4A16 (nvfp4-pack-quantized)", "NVFP4 W4A4
  // (nvfp4-pack-quantized)".
  std::string describe() const;
  bool operator==(const CtScheme&) const = default;
};

// The scheme a layer maps onto (its grid, bits, groups; symmetric as given for the uniform grid;
// the model's activation grid). Fails naming `name` for a layer no scheme holds (a GGUF grid).
CtScheme ct_scheme_of(const QuantizedWeight& w, bool symmetric, std::optional<FpGrid> activations,
                      const std::string& name);

// config.json's "quantization_config": one config group "group_0" targeting "Linear" with the
// scheme's weights, `ignore` the linear layers left in full precision (e.g. "lm_head"),
// quantization_status "compressed".
io::Json ct_quantization_config(const CtScheme& scheme, const std::vector<std::string>& ignore);

struct CtConfig {
  CtScheme scheme;
  // input_activations that are none of the above (e.g. static int8): described here, not read.
  std::string unread_activations;
  std::vector<std::string> ignore;
  std::vector<std::string> targets;
};

// Reads a quantization_config (quant_method "compressed-tensors", status "compressed", one config
// group whose weights are a scheme above, the group's format or the top-level one). Errors name
// `where` (the file) and the field.
CtConfig ct_config_from_json(const io::Json& qc, std::string_view where);

}  // namespace rqat::quant
