// Whole operations on model directories behind the `rqat` subcommands init-model, logits and info,
// kept in the library so apps only parse flags.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "io/gguf_file.h"
#include "model/model_dir.h"

namespace rqat::tools {

struct InitModelOptions {
  std::filesystem::path config_json;
  std::filesystem::path out_dir;
  uint64_t seed = 0;
  double init_std = -1;  // <0: the config's initializer_range (0.02 when absent)
  at::ScalarType dtype = at::kFloat;
  uint64_t max_shard_bytes = 5'000'000'000;
  // Tokenizer files copied into the new directory (its vocabulary must fit the config's).
  std::optional<std::filesystem::path> tokenizer_dir;
};

// Writes a randomly initialized model directory from a config.json.
void init_model_dir(const InitModelOptions& options);

// Re-saves a model directory (another dtype, another shard size), tokenizer files included.
void convert_model_dir(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                       std::optional<at::ScalarType> dtype, uint64_t max_shard_bytes);

// Writes a model directory (full precision, a rqat artifact, or a GPTQ checkpoint, dequantized) as
// one GGUF file for llama.cpp with its matrices in `type`, each block quantized as llama.cpp's
// reference quantizer does (quant/gguf/export.h); a type the shapes cannot hold fails first. The
// layers of an artifact trained or quantized on the grid of `type` (--grid gguf-<type>) are
// written from their own codes, checked to lose nothing. embedding_type: the token embeddings' and
// output layer's type when not `type`. imatrix: llama.cpp's imatrix GGUF (llama-imatrix's or
// ptq --imatrix's); the matrices it names are quantized with it, as llama-quantize --imatrix.
// Says what it did on `out`.
void convert_model_to_gguf(const std::filesystem::path& in_dir,
                           const std::filesystem::path& out_file, io::GgufType type,
                           std::optional<io::GgufType> embedding_type, std::ostream& out,
                           const std::filesystem::path& imatrix = {});

// Reads input_ids and attention_mask (int64 (B, T)) from a safetensors file, writes float32 logits
// (B, T, vocab) to another.
void write_logits(const std::filesystem::path& model_dir, const std::filesystem::path& input,
                  const std::filesystem::path& output, const model::LoadOptions& options);

// Human-readable summary: family, shapes, parameter count, dtype, files.
std::string describe_model(const std::filesystem::path& model_dir);

}  // namespace rqat::tools
