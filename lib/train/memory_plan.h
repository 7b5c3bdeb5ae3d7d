// Per-rank GPU memory of a training run, worked out from the model's shape before anything is
// allocated (issue 19, docs/distributed.md "Memory plan"): pure arithmetic over a config.json.
//
// Notation: N parameters of the trained model (LoRA adapters included), T trainable, T_L trainable
// inside decoder layers, R_T = T - T_L, L_max the largest layer's trainable parameters, W ranks,
// c bytes of the compute dtype (bf16 2, f32 4), /W a ceiling division. Per rank:
//
//   shard        weights        gradients            master     moments
//   none         N*4            T*4                  0          T*8
//   optimizer    N*c            T*c + T*4/W          T*4/W      T*8/W
//   gradients    N*c            R_T*c + T*4/W        T*4/W      T*8/W
//   parameters   (N - T_L)*c    R_T*c + T*4/W        T*4/W      T*8/W
//
// `none` keeps float32 parameters and autocasts to bf16, the others keep compute copies in c and
// float32 master weights of their slice. These lines are exactly what the sharded trainer allocates
// (its benchmark measures them); the teacher, KV cache and activation lines are estimates (below).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "model/model_config.h"
#include "train/shard_mode.h"

namespace rqat::train {

// Parameters of a CausalLM built from a config (or a subset of them, e.g. the trainable ones),
// split the way sharding splits them: decoder layers ("model.layers.N.*") and the rest ("root":
// embed_tokens, the final norm, lm_head when untied).
struct ParameterCounts {
  int64_t total = 0;
  int64_t layers = 0;         // inside model.layers.N.*
  int64_t root = 0;           // total - layers
  int64_t largest_layer = 0;  // the largest single decoder layer
};

// Every parameter of model::CausalLM(config, ...) (exactly its named_parameters()): per layer two
// RMSNorms, q/k/v/o (with qwen2's q/k/v biases, llama's attention_bias/mlp_bias), qwen3's q_norm
// and k_norm, the SwiGLU MLP; embed_tokens, model.norm and an untied lm_head.
ParameterCounts count_parameters(const model::ModelConfig& config);

// LoRA adapters (lib/train/lora_model.h): rank * (in + out) for every linear layer (the seven
// projections of each block, lm_head when untied) whose full name matches one of `target_modules`
// entirely (std::regex ECMAScript, as attach_lora; empty: its default). rqat::Error naming
// --lora-target-modules when a regex is invalid or nothing matches, --lora-rank when rank < 1.
ParameterCounts count_lora_parameters(const model::ModelConfig& config, int64_t rank,
                                      const std::vector<std::string>& target_modules);

struct LoraAdapters {
  int64_t rank = 16;
  std::vector<std::string> target_modules;  // empty: default_lora_target_modules()
};

// GRPO's rollouts of one step: every sequence of the rank is in the generation engine's KV cache.
struct RolloutShape {
  int64_t prompts_per_rank = 1;
  int64_t group_size = 1;       // completions per prompt
  int64_t sequence_tokens = 1;  // prompt + max new tokens
};

struct MemoryPlanInput {
  model::ModelConfig model;          // the trained model (its base, before LoRA)
  std::optional<LoraAdapters> lora;  // set: only the adapters train (QLoRA); else every parameter
  ShardMode shard = ShardMode::kNone;
  int64_t world_size = 1;
  int64_t compute_bytes = 2;              // c: 2 for bf16, 4 for f32
  int64_t micro_batch = 1;                // sequences per forward/backward on one rank
  int64_t sequence_length = 2048;         // tokens per sequence
  bool activation_checkpointing = false;  // forced on by --shard gradients and parameters
  bool fake_quant = false;  // QAT: each linear's fake-quantized weight is saved for backward
  std::optional<model::ModelConfig> frozen;  // qat-kd's teacher or grpo's reference policy
  int64_t frozen_bytes = 0;  // the frozen model's dtype bytes (0: compute_bytes)
  bool frozen_logits = false;                // qat-kd: the teacher's logits of each micro-batch
  std::optional<RolloutShape> rollouts;      // grpo
};

// Bytes per rank. The fake-quant scales (LSQ) are parameters too but are left out: one per group
// of 128 weights (two with zero points) is under 1% of a layer.
struct MemoryPlan {
  ParameterCounts parameters;  // N (adapters included)
  ParameterCounts trainable;   // T, T_L, R_T, L_max
  ParameterCounts frozen;      // the teacher/reference model's (zero without one)
  bool checkpointed = false;   // activation checkpointing in effect
  int64_t weights = 0, gradients = 0, master = 0, moments = 0;
  int64_t frozen_weights = 0;                                  // teacher/reference
  int64_t kv_cache = 0;                                        // rollouts
  int64_t rollout_weights = 0;  // parameters mode: the policy's layers gathered for rollouts
  int64_t activations = 0;                                     // as run (checkpointed or not)
  int64_t activations_full = 0, activations_checkpointed = 0;  // both, for comparison
  int64_t transient = 0;  // gathered layers (parameters mode) or autocast's bf16 weights (none)
  // weights + gradients + master + moments + teacher
  //   + max(KV cache + rollout weights, activations + transient):
  // the engine's KV cache is freed before the update runs, so the two never coexist.
  int64_t total = 0;
};

MemoryPlan plan_memory(const MemoryPlanInput& input);

// Elements autograd keeps per token of one decoder layer (see memory_plan.cpp).
int64_t activation_elements_per_token(const model::ModelConfig& config);

// The plan as a table: one row per line of the plan and the total, a GiB column and how each
// line is made; then the activations with and without checkpointing.
std::string format_memory_plan(const MemoryPlan& plan, const MemoryPlanInput& input);
// The plan as JSON: counts, bytes per line and GiB.
io::Json memory_plan_json(const MemoryPlan& plan, const MemoryPlanInput& input);

inline double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }

}  // namespace rqat::train
