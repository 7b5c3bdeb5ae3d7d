// Building blocks of the decoder (Hugging Face parameter names): token embedding, RMSNorm,
// grouped-query self-attention with rotary embeddings, the SwiGLU MLP and the decoder layer.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/model_config.h"
#include "model/paged_kv_cache.h"

namespace rqat::model {

class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t vocab_size, int64_t dim, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& ids);  // (B, T) int64 -> (B, T, dim)
  at::Tensor weight;                          // (vocab_size, dim)
};

class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t dim, double eps, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // (dim)
  double eps;
};

// Where the current tokens sit and what they may attend to, shared by all layers of one forward.
struct AttentionContext {
  at::Tensor cos, sin;     // (B, T, head_dim); sin with its first half negated (model/rotary.h)
  at::Tensor mask;         // bool (B, 1, T, keys): true where attention is allowed
  int64_t key_length = 0;  // keys attended to (positions [0, key_length))

  // The paged KV cache of generation (null for a plain forward): each new token's keys and values
  // go to pool row slot_mapping[b * T + t]; decode steps attend through block_tables/context_lens,
  // prefill chunks through the gathered positions [0, key_length) under `mask`, or, when every row
  // starts at position 0 (fresh_sequences), to the new keys directly.
  PagedKVCache* paged = nullptr;
  at::Tensor slot_mapping;  // int64 (B * T)
  at::Tensor block_tables;  // int32 (B, max_blocks)
  at::Tensor context_lens;  // int32 (B)
  bool fresh_sequences = false;
};

// A named Linear inside a module, so quantization can find and replace it.
struct LinearSlot {
  std::string
      name;  // qualified Hugging Face name without ".weight", e.g. model.layers.0.mlp.up_proj
  torch::nn::Module* owner;
  std::string local_name;
  std::shared_ptr<Linear>* layer;
};

class Attention : public torch::nn::Module {
 public:
  Attention(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& ctx, int64_t layer_index);
  void collect_linears(const std::string& prefix, std::vector<LinearSlot>& out);

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // qwen3 only

 private:
  // q: (B, heads, T, D), k, v: (B, kv_heads, T, D) after rotation -> (B, T, heads * D).
  at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const AttentionContext& ctx, int64_t layer_index);

  int64_t heads_, kv_heads_, head_dim_;
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);  // down(silu(gate(x)) * up(x))
  void collect_linears(const std::string& prefix, std::vector<LinearSlot>& out);

  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
};

class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionContext& ctx, int64_t layer_index);

  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<Mlp> mlp;
};

}  // namespace rqat::model
