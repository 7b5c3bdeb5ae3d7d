// The decoder-only causal language model shared by qwen2, qwen3 and llama checkpoints:
// embedding -> N x (RMSNorm, GQA attention, RMSNorm, SwiGLU) -> RMSNorm -> lm_head (tied or not).
// Two entry points: a full-sequence forward (training, scoring) and the forward over the paged KV
// cache (prefill and decode for generation). Parameter names match Hugging Face's state dict.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <memory>
#include <vector>

#include "io/safetensors.h"
#include "model/layer_scope.h"
#include "model/layers.h"
#include "model/model_config.h"
#include "model/paged_step.h"
#include "model/rotary.h"

namespace rqat::model {

class Backbone : public torch::nn::Module {
 public:
  Backbone(const ModelConfig& config, const at::TensorOptions& options);
  std::shared_ptr<Embedding> embed_tokens;
  torch::nn::ModuleList layers;
  std::shared_ptr<RMSNorm> norm;
};

class CausalLM : public torch::nn::Module {
 public:
  // Parameters start uninitialized; load_causal_lm() or init_random() fills them.
  CausalLM(const ModelConfig& config, const at::TensorOptions& options);

  // input_ids: (B, T) int64; attention_mask: (B, T), 1 for tokens and 0 for (left) padding, or
  // undefined for none. Positions count real tokens only, so a left-padded row gives the same
  // outputs as the row alone. Returns the final normed hidden states (B, T, hidden).
  at::Tensor hidden_states(const at::Tensor& input_ids, const at::Tensor& attention_mask = {});
  at::Tensor logits(const at::Tensor& hidden);  // (..., hidden) -> (..., vocab)
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}) {
    return logits(hidden_states(input_ids, attention_mask));
  }

  // The generation engine's forward over the paged cache: writes the step's keys and values into
  // `cache` at step.slot_mapping and returns the logits of each row's last new token, (B, vocab).
  // Sequence lengths are the caller's to advance.
  at::Tensor forward_paged(const PagedStep& step, PagedKVCache& cache);
  PagedKVCache make_paged_cache(int64_t num_blocks, int64_t block_size) const;

  // Block-wise access for calibration (ptq runs one decoder block at a time over all samples):
  // the attention context of a full-sequence forward, the token embeddings, and the blocks.
  // hidden_states() == norm(layer(n-1)(... layer(0)(embed(ids), ctx) ...)).
  AttentionContext sequence_context(const at::Tensor& input_ids,
                                    const at::Tensor& attention_mask = {});
  at::Tensor embed(const at::Tensor& input_ids);
  int64_t num_layers() const { return static_cast<int64_t>(model->layers->size()); }
  DecoderLayer& layer(int64_t index);

  // Every Linear of the decoder blocks (and lm_head when untied and asked for), in model order.
  std::vector<LinearSlot> linear_layers(bool include_lm_head = false);
  void replace_linear(const LinearSlot& slot, std::shared_ptr<Linear> layer);

  // Checkpoint tensors under Hugging Face names (a tied lm_head is not stored separately).
  io::NamedTensors state_tensors() const;

  // Training: recompute each block in the backward pass instead of keeping its activations
  // (model/activation_checkpoint.h). Only full-sequence forwards with autograd on are affected.
  void set_activation_checkpointing(bool enabled) { activation_checkpointing_ = enabled; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // Runs `scope` around every decoder layer (model/layer_scope.h; null: none). A scope implies
  // activation checkpointing in training forwards, so that each layer's backward is bracketed
  // too. The scope outlives its use by this model.
  void set_layer_scope(LayerScope* scope) { layer_scope_ = scope; }
  LayerScope* layer_scope() const { return layer_scope_; }

  // The dtype activations, rotary tables and KV caches are made in. Sharded bf16 training turns a
  // model loaded in float32 into bf16 compute copies (train/sharded_parameters.h) and says so here.
  void set_compute_dtype(at::ScalarType dtype) { options_ = options_.dtype(dtype); }

  const ModelConfig& config() const { return config_; }
  const at::TensorOptions& options() const { return options_; }

  std::shared_ptr<Backbone> model;
  std::shared_ptr<Linear> lm_head;  // null when tied to model.embed_tokens

 private:
  at::Tensor run_layers(at::Tensor x, const AttentionContext& ctx);

  ModelConfig config_;
  at::TensorOptions options_;
  RotaryEmbedding rotary_;
  bool activation_checkpointing_ = false;
  LayerScope* layer_scope_ = nullptr;
};

}  // namespace rqat::model
