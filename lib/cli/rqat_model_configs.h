// The configurations of rqat's model utilities, declared once (io/options.h): init-model, logits,
// convert (also from llama2.c or GGUF, and to GGUF), info and tokenize. Their flags, help and
// defaults derive from these; each run() is the subcommand's body (apps/rqat runs it in run_tool).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "cli/runtime_flags.h"
#include "io/enum_names.h"
#include "io/gguf_file.h"
#include "io/options.h"
#include "tools/model_commands.h"

namespace rqat::cli {

// How a written model stores its weights.
enum class StoredDtype { kF32, kBf16, kCount };
constexpr EnumNames<StoredDtype> enum_names(StoredDtype) { return {"f32", "bf16"}; }

// convert's --dtype: keep re-saves each tensor in the dtype it has.
enum class ConvertDtype { kKeep, kF32, kBf16, kCount };
constexpr EnumNames<ConvertDtype> enum_names(ConvertDtype) { return {"keep", "f32", "bf16"}; }

// What convert writes.
enum class ConvertTarget { kDir, kGguf, kCompressedTensors, kCount };
constexpr EnumNames<ConvertTarget> enum_names(ConvertTarget) {
  return {"dir", "gguf", "compressed-tensors"};
}

// `rqat init-model`: a randomly initialized model directory from a config.json.
struct InitModelConfig {
  tools::InitModelOptions init;  // config, out, seed, tokenizer as declared; the rest below
  std::optional<double> init_std;
  StoredDtype dtype = StoredDtype::kF32;
  double max_shard_mb = 5000;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.init.config_json, "config", "config.json (qwen2, qwen3 or llama)", Role::kSetting,
            {.required = true});
    v.value(self.init.out_dir, "out", "Output model directory", Role::kRunControl,
            {.required = true});
    v.value(self.init.seed, "seed", "Random seed");
    v.value(self.init_std, "std", "Weight std (default: config initializer_range or 0.02)");
    v.value(self.dtype, "dtype", "Stored dtype: f32 or bf16");
    v.value(self.max_shard_mb, "max-shard-mb", "Largest shard in MB (0: one file)");
    v.value(self.init.tokenizer_dir, "tokenizer",
            "Copy this directory's tokenizer files into the model (e.g. rqat tiny-task's "
            "tokenizer/)");
  }

  // The library's options (errors name the flag).
  tools::InitModelOptions resolve() const;
  void run(std::ostream& out) const;
};

// `rqat logits`: logits of token ids stored in a safetensors file.
struct LogitsConfig {
  std::filesystem::path model, input, out;
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.model, "model", "Model directory", Role::kSetting, {.required = true});
    v.value(self.input, "input", "safetensors with input_ids and attention_mask (int64, B x T)",
            Role::kSetting, {.required = true});
    v.value(self.out, "out", "safetensors file to write 'logits' (float32, B x T x V) to",
            Role::kRunControl, {.required = true});
    io::section(v, "Runtime", self.runtime);
  }

  // Also applies the runtime flags.
  void run() const;
};

// `rqat convert`: a model directory re-saved (dtype, shards) or written as one GGUF file, a GGUF
// file written back as a model directory, or a llama2.c checkpoint converted.
struct ConvertConfig {
  std::string model;  // a directory, or a .gguf file
  std::filesystem::path llama2c, llama2c_tokenizer, out;
  ConvertTarget to = ConvertTarget::kDir;
  std::filesystem::path gguf_tokenizer;
  io::GgufType gguf_type = io::GgufType::kF16;
  std::filesystem::path imatrix;
  std::optional<io::GgufType> gguf_embedding_type;
  ConvertDtype dtype = ConvertDtype::kKeep;
  double max_shard_mb = 5000;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.model, "model",
            "Input model directory, or a .gguf file or compressed-tensors checkpoint (written back "
            "as a model directory)");
    v.value(self.llama2c, "llama2c",
            "Input llama2.c checkpoint (float32 .bin, v0 or v1) instead of --model");
    v.value(self.llama2c_tokenizer, "tokenizer-bin",
            "llama2.c tokenizer.bin of the checkpoint (written as tokenizer.json)");
    v.value(self.out, "out", "Output model directory (a .gguf file with --to gguf)",
            Role::kRunControl, {.required = true});
    v.value(self.to, "to",
            "dir: a Hugging Face model directory; gguf: one GGUF file for llama.cpp; "
            "compressed-tensors: a checkpoint vLLM and SGLang serve, of a model with a quant "
            "state on a grid they take (exact)");
    v.value(self.gguf_tokenizer, "tokenizer",
            "With a .gguf --model: copy this directory's tokenizer files into the output");
    v.value(self.gguf_type, "gguf-type",
            "GGUF type of the weight matrices with --to gguf (llama.cpp's reference quantization "
            "of it; norms and biases stay f32)");
    v.value(self.imatrix, "imatrix",
            "With --to gguf: llama.cpp's imatrix GGUF (llama-imatrix, or ptq --imatrix's "
            "OUT/imatrix.gguf); the matrices it names are quantized with it, as llama-quantize "
            "--imatrix");
    v.value(self.gguf_embedding_type, "gguf-embedding-type",
            "GGUF type of the token embeddings and output layer with --to gguf (default: "
            "--gguf-type; f32 keeps them as rqat has them)");
    v.value(self.dtype, "dtype", "Stored dtype: keep, f32 or bf16");
    v.value(self.max_shard_mb, "max-shard-mb", "Largest shard in MB (0: one file)");
  }

  void run(std::ostream& out) const;
};

// `rqat info`: a description of a model directory.
struct InfoConfig {
  std::filesystem::path model;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.model, "model", "Model directory", io::Role::kSetting, {.required = true});
  }

  void run(std::ostream& out) const;
};

// `rqat tokenize`: the token ids of each line of a file.
struct TokenizeConfig {
  std::filesystem::path tokenizer_dir;
  bool add_special = false;
  std::string file;  // "-": stdin

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.tokenizer_dir, "tokenizer", "Tokenizer or model directory", Role::kSetting,
            {.required = true});
    v.value(self.add_special, "add-special",
            "Add the special tokens the tokenizer adds (e.g. BOS)");
    v.value(self.file, "file", "Text file, one input per line", Role::kSetting,
            {.required = true, .positional = true});
  }

  // Reads the lines from `in` when the file is "-".
  void run(std::istream& in, std::ostream& out) const;
};

}  // namespace rqat::cli
