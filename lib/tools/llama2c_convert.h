// Conversion of karpathy/llama2.c checkpoints (float32 .bin, with the tokenizer.bin beside them)
// into a Hugging Face Llama model directory, so rqat's quantizers and evaluators can run on small
// but really trained models (stories260K, stories15M, ...) and transformers can load the result.
//
// llama2.c v0 ("legacy") file: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means an unshared classifier), then float32 arrays,
// each stacked over layers: token embedding, attention norms, wq, wk, wv, wo, ffn norms, w1, w2,
// w3, final norm, two RoPE tables (seq_len x head_size/2 each, unused), and the classifier when
// unshared. v1: a 256-byte header (uint32 magic "ak42", int32 version 1, the 7 int32, uint8
// shared_classifier), then norms, final norm, embedding, wq, wk, wv, wo, w1, w2, w3 (classifier).
// Matrices are stored (out, in) as in PyTorch's Linear.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <optional>

#include "io/json_file.h"
#include "io/safetensors.h"

namespace rqat::tools {

struct Llama2cHeader {
  int version = 0;  // 0: legacy, 1: "ak42" float32 export
  int64_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0,
          seq_len = 0;
  bool shared_classifier = true;
  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
};

struct Llama2cCheckpoint {
  Llama2cHeader header;
  io::NamedTensors tensors;  // Hugging Face names and layout (q/k rows already permuted)
};

// Reads a float32 llama2.c checkpoint (v0 or v1). Errors name the file: an unknown magic or
// version, a header that cannot describe a model, a size that differs from what the header implies.
Llama2cCheckpoint read_llama2c_checkpoint(const std::filesystem::path& path);

// config.json of the converted model: LlamaForCausalLM with run.c's hard-coded constants
// (rms_norm_eps 1e-5, rope_theta 10000), bos 1, eos 2, max_position_embeddings = seq_len.
io::Json llama2c_config_json(const Llama2cHeader& header);

// llama2.c's run.c rotates the interleaved pairs (2i, 2i+1) of each head; Hugging Face Llama
// rotates (i, i + head_size/2). Reordering the output rows of wq and wk within each head this way
// gives the same attention scores (q.k is a sum over pairs, whatever their order).
at::Tensor interleaved_to_half_rotary(const at::Tensor& weight, int64_t heads);

struct Llama2cConvertOptions {
  std::filesystem::path checkpoint;
  std::optional<std::filesystem::path> tokenizer_bin;  // llama2.c tokenizer.bin (tok512.bin, ...)
  std::filesystem::path out_dir;
  at::ScalarType dtype = at::kFloat;  // stored dtype
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Writes config.json, generation_config.json, model.safetensors and, with a tokenizer,
// tokenizer.json + tokenizer_config.json. Everything is read and checked before anything is
// written (a vocabulary size that differs from the checkpoint's is an error naming both files).
void convert_llama2c(const Llama2cConvertOptions& options);

}  // namespace rqat::tools
