// Building blocks of the decoder (Hugging Face parameter names): token embedding, RMSNorm,
// grouped-query self-attention with rotary embeddings, the SwiGLU MLP and the decoder layer.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/model_config.h"

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
  at::Tensor cos, sin;       // (B, T, head_dim)
  at::Tensor mask;           // bool (B, 1, T, keys): true where attention is allowed
  at::Tensor additive_mask;  // T == 1 only: (B, 1, 1, keys) 0 where allowed, -inf elsewhere
  KVCache* cache = nullptr;
  at::Tensor slot_index;       // int64 (B): cache slot of each row
  at::Tensor write_positions;  // int64 (B, T): cache position of each new token
  bool leading_slots = false;  // slots are 0..B-1: cached keys are read as a view, not gathered
  int64_t common_start = -1;   // with leading_slots: every row writes at this position (else -1)
  int64_t key_length = 0;      // keys attended to (cache positions [0, key_length))
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
