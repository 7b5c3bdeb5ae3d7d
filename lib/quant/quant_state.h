// quant_state.safetensors: the quantized state of every quantized layer of an artifact, the input
// of QAT (issue 6), evaluation and export. Per layer NAME: NAME.codes (uint8, out x in),
// NAME.scales and NAME.zeros (float32, out x groups), NAME.g_idx (int32, in), on a GGUF grid's
// K-quants NAME.super_scales (float32, out x blocks x 2: d, dmin), under NVFP4 activations
// NAME.input_global_scale (float32 {1}, quant/activation_quant.h); the metadata holds
// the QuantSpec as JSON under "rqat.quant_spec". The artifact's model.safetensors holds the
// dequantized weights of the same layers, so full-precision loaders run the quantized model.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

inline constexpr const char* kQuantStateFile = "quant_state.safetensors";

struct QuantState {
  QuantSpec spec;
  std::map<std::string, QuantizedWeight> layers;
};

void save_quant_state(const std::filesystem::path& dir, const QuantState& state);
// Errors name the file and tensor (missing parts, shapes that disagree, codes out of range).
QuantState load_quant_state(const std::filesystem::path& dir);
// The spec alone (the file's metadata, no tensor read), or nullopt when `dir` has no state.
std::optional<QuantSpec> read_quant_spec(const std::filesystem::path& dir);
// The layers' input global scales alone (name -> float32 {1}; empty when `dir` has no state or
// no NVFP4 activations): what loading a model with activation quantization needs.
std::map<std::string, at::Tensor> read_input_global_scales(const std::filesystem::path& dir);

}  // namespace rqat::quant
