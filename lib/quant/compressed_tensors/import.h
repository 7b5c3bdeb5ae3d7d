// A compressed-tensors checkpoint (export.h; llm-compressor's, for the schemes of scheme.h) back as
// rqat's: the quantized layers' codes and scales as a QuantState, and a dense model whose
// quantized layers hold QuantizedWeight::dequantize() (float32), so that rqat evaluates or
// continues training (QAT, GRPO) exactly what the checkpoint stores.
#pragma once

#include <filesystem>
#include <string>

#include "io/safetensors.h"
#include "model/model_config.h"
#include "quant/compressed_tensors/scheme.h"
#include "quant/quant_state.h"

namespace rqat::quant {

struct CompressedTensorsModel {
  model::ModelConfig config;  // config.json without its quantization_config, torch_dtype float32
  io::NamedTensors tensors;   // every weight under its Hugging Face name, float32
  QuantState state;           // the quantized layers by module name; the spec from the scheme
  CtScheme scheme;
  // The checkpoint's input_activations when they are not a scheme rqat computes (its weights
  // import; its activations would be served otherwise): empty when read, or none.
  std::string unread_activations;
};

// Reads dir (config.json, model.safetensors or shards). A layer is quantized where its packed
// tensors are (NAME.weight_packed, or an fp8 NAME.weight with NAME.weight_scale). Errors name the
// file (config.json, the checkpoint) and the field or tensor: an unsupported scheme, a missing or
// misshapen part, values out of range.
CompressedTensorsModel read_compressed_tensors(const std::filesystem::path& dir);

// read_compressed_tensors written as an rqat artifact directory: config.json, model.safetensors
// (dense, float32), quant_state.safetensors, generation_config.json and the tokenizer files of
// dir. out_dir is written in place (files atomically; config.json last).
CompressedTensorsModel import_compressed_tensors(const std::filesystem::path& dir,
                                                 const std::filesystem::path& out_dir);

}  // namespace rqat::quant
