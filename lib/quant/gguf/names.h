// Where a Hugging Face decoder's tensors go in a GGUF file: llama.cpp's tensor names
// ("model.layers.3.mlp.up_proj.weight" <-> "blk.3.ffn_up.weight"), and the reordering of llama's q
// and k rows that llama.cpp's interleaved rope needs (Hugging Face's llama, like Qwen everywhere,
// rotates halves: llama.cpp's qwen2/qwen3 do too, its llama rotates adjacent pairs).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

namespace rqat::quant {

// Empty for a name GGUF has no place for.
std::string gguf_tensor_name(const std::string& hf_name);
std::string hf_tensor_name(const std::string& gguf_name);

// The layer a weight tensor belongs to, as quant states name layers: "model.layers.0.mlp.up_proj"
// for "model.layers.0.mlp.up_proj.weight"; nullopt for a tensor that is not a weight.
std::optional<std::string> weight_layer_name(const std::string& hf_name);

// Rows (dim 0) of `heads` heads from rotate-half order to interleaved pairs: row h*d + 2j + half
// takes row h*d + half*d/2 + j; and back.
at::Tensor interleave_rope_rows(const at::Tensor& w, int64_t heads);
at::Tensor deinterleave_rope_rows(const at::Tensor& w, int64_t heads);
// The same as an index (rows) int64: row r of the reordered weight is row index[r] of the original
// (interleave: Hugging Face to llama.cpp; else back).
at::Tensor rope_row_order(int64_t rows, int64_t heads, bool interleave);
// The heads whose rows a tensor has reordered between the two layouts: llama's q_proj and k_proj
// weights and biases (query or key/value heads), else none (Qwen's rope is Hugging Face's).
std::optional<int64_t> rope_reordered_heads(const std::string& hf_name, bool llama,
                                            int64_t query_heads, int64_t kv_heads);

}  // namespace rqat::quant
