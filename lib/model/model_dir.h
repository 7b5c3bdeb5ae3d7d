// Loading and saving a Hugging Face model directory (config.json, generation_config.json,
// safetensors weights, tokenizer files) as a CausalLM. Loading maps the weights: in the
// checkpoint's own dtype on the CPU no tensor is copied.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "model/decoder.h"

namespace rqat::model {

struct LoadOptions {
  at::ScalarType dtype = at::kFloat;  // compute dtype; weights are converted if stored otherwise
  c10::Device device = c10::kCPU;
  // Quantized checkpoints (GPTQ): dequantize their layers at load instead of computing from the
  // packed codes (quant/packed_gptq_linear.h). Full-precision checkpoints ignore it.
  bool dequantize = false;
};

struct SaveOptions {
  std::optional<at::ScalarType> dtype;       // store in this dtype (default: the model's)
  uint64_t max_shard_bytes = 5'000'000'000;  // as transformers' default "5GB"; 0 = one file
  std::optional<std::filesystem::path> tokenizer_from;  // copy tokenizer files from this directory
};

// A full-precision checkpoint (quantized ones load through quant::load_model, which swaps in
// their layers first).
std::shared_ptr<CausalLM> load_causal_lm(const io::Artifact& artifact,
                                         const LoadOptions& options = {});
std::shared_ptr<CausalLM> load_causal_lm(const std::filesystem::path& dir,
                                         const LoadOptions& options = {});
// The model the artifact's config.json (and generation_config.json) describes, its modules
// allocated but not filled: a loader may replace layers (CausalLM::replace_linear) before
// load_weights. The path versions open the artifact first.
std::shared_ptr<CausalLM> build_causal_lm(const io::Artifact& artifact,
                                          const LoadOptions& options = {});
std::shared_ptr<CausalLM> build_causal_lm(const std::filesystem::path& dir,
                                          const LoadOptions& options = {});
void save_causal_lm(const CausalLM& model, const std::filesystem::path& dir,
                    const SaveOptions& options = {});

// Writes config.json (with config.raw's unknown keys, e.g. a quantization_config) and
// generation_config.json, as save_causal_lm does.
void save_model_config(const ModelConfig& config, const std::filesystem::path& dir);

// Copies the tokenizer files transformers' AutoTokenizer reads (tokenizer.json, vocab.json, ...)
// that exist in `from` into `to`, so an artifact directory is self-contained.
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

// Moves the weights of `checkpoint` into the parameters of `model` (names, shapes checked).
void load_weights(CausalLM& model, const std::filesystem::path& dir);

const char* hf_dtype_name(at::ScalarType dtype);             // "float32", "bfloat16", "float16"
at::ScalarType hf_dtype_to_scalar(const std::string& name);  // inverse; float32 for unknown names

}  // namespace rqat::model
