// A quantized model as a compressed-tensors checkpoint (llm-compressor's format, which vLLM and
// SGLang serve; scheme.h, tensors.h): config.json with a "quantization_config" as
// compressed-tensors writes it, model.safetensors (or shards) holding every quantized layer NAME as
// its packed tensors (NAME.weight_packed, NAME.weight_scale, ...) and every other tensor as a
// Hugging Face checkpoint does, generation_config.json and the tokenizer files.
//
// Exact: each layer's tensors are decoded back and the weight compressed-tensors computes from them
// (ct_dequantize, in float32) must equal QuantizedWeight::dequantize() bit for bit, else the export
// fails naming the layer. compressed-tensors itself returns that weight in the dtype it computes
// in: float32 with float32 scales; with bf16/fp16 int scales, and for nvfp4 (which it unpacks into
// bf16), that weight rounded once to bf16/fp16 (mxfp4's and fp8's are exact there too).
#pragma once

#include <ATen/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "quant/compressed_tensors/scheme.h"
#include "quant/quant_state.h"

namespace rqat::quant {

struct CompressedTensorsExportOptions {
  // The full-precision tensors' dtype, which pack-quantized (int) scales are stored in too
  // (default: the model's). An int layer whose scales are not values of it is refused.
  std::optional<at::ScalarType> dtype;
  uint64_t max_shard_bytes = 5'000'000'000;  // as transformers' "5GB"; 0: one file
};

struct CompressedTensorsSummary {
  CtScheme scheme;
  int64_t quantized_layers = 0;
  std::vector<std::string> ignored;   // the config's "ignore": linear layers in full precision
  uint64_t packed_bytes = 0;          // the quantized layers' tensors
  uint64_t full_precision_bytes = 0;  // every other tensor
};

// Before any work: the scheme of state's layers (one for all; symmetric from state.spec), and
// the refusals that need no packing: a layer the model does not have or of another shape, a GGUF
// grid, mixed schemes, rows that are not whole groups, act-order. Errors name the layer.
CtScheme check_compressed_tensors_exportable(const model::CausalLM& model, const QuantState& state);

// Writes out_dir (which must not exist, or be empty): every layer of state.layers (module name ->
// quantized state; the model's dense weights of those layers are not used) packed, every other
// tensor of `model` converted to options.dtype, config.json, generation_config.json, and the
// tokenizer files of tokenizer_dir. Everything is checked before anything is written; the files
// are written into a temporary sibling directory renamed to out_dir at the end.
CompressedTensorsSummary export_compressed_tensors(
    const model::CausalLM& model, const QuantState& state,
    const std::filesystem::path& tokenizer_dir, const std::filesystem::path& out_dir,
    const CompressedTensorsExportOptions& options = {});

}  // namespace rqat::quant
