// See memory_plan.h. Activations follow Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models", section 4.1): count the tensors autograd keeps for
// the backward pass of one layer, per token. Their attention-score term (5 a s / h) is left out:
// rqat's attention is fused (ops/attention.h keeps q, k, v, the output and a log-sum-exp, never
// the s x s scores), and their GPT MLP and dropout masks are replaced by this decoder's SwiGLU and
// no dropout.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "io/checked_size.h"
#include "io/error.h"
#include "train/lora_model.h"

namespace rqat::train {

namespace {

// A product of sizes from flags and config.json; absurd flags fail instead of wrapping around.
int64_t product(std::initializer_list<int64_t> factors) {
  const auto out = io::checked_product(factors);
  if (!out)
    fail(
        "memory plan: the sizes overflow 64 bits (check --max-length, --micro-batch-size and the "
        "rollout flags)");
  return *out;
}

int64_t sum(std::initializer_list<int64_t> terms) {
  int64_t out = 0;
  for (const int64_t t : terms) {
    const auto next = io::checked_add(out, t);
    if (!next) fail("memory plan: the sizes overflow 64 bits");
    out = *next;
  }
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One linear layer of the model: its Hugging Face name and shape.
struct LinearShape {
  std::string name;
  int64_t in = 0, out = 0;
  int64_t layer = -1;  // decoder layer index, -1 for lm_head
};

// The layers CausalLM::linear_layers(/*include_lm_head=*/true) lists, in the same order.
std::vector<LinearShape> linear_shapes(const model::ModelConfig& c) {
  std::vector<LinearShape> out;
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inner = c.intermediate_size;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "self_attn.q_proj", h, q, i});
    out.push_back({p + "self_attn.k_proj", h, kv, i});
    out.push_back({p + "self_attn.v_proj", h, kv, i});
    out.push_back({p + "self_attn.o_proj", q, h, i});
    out.push_back({p + "mlp.gate_proj", h, inner, i});
    out.push_back({p + "mlp.up_proj", h, inner, i});
    out.push_back({p + "mlp.down_proj", inner, h, i});
  }
  if (!c.tie_word_embeddings) out.push_back({"lm_head", h, c.vocab_size, -1});
  return out;
}

int64_t layer_parameters(const model::ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inner = c.intermediate_size;
  int64_t n = 2 * h;                // input_layernorm, post_attention_layernorm
  n += h * q + 2 * h * kv + q * h;  // q, k, v, o
  if (c.attention_bias) n += q + 2 * kv;
  if (c.o_proj_bias) n += h;
  if (c.qk_norm) n += 2 * c.head_dim;  // q_norm, k_norm
  n += 3 * h * inner;                  // gate, up, down
  if (c.mlp_bias) n += 2 * inner + h;
  return n;
}

// Weights of one layer's seven projections (no biases): what fake quantization copies.
int64_t layer_linear_weights(const model::ModelConfig& c) {
  const int64_t h = c.hidden_size;
  return 2 * h * c.q_dim() + 2 * h * c.kv_dim() + 3 * h * c.intermediate_size;
}

}  // namespace

ParameterCounts count_parameters(const model::ModelConfig& c) {
  // weight_element_count bounds the total to 2^42, so the products below fit.
  model::weight_element_count(c);
  ParameterCounts n;
  n.largest_layer = layer_parameters(c);
  n.layers = n.largest_layer * c.num_hidden_layers;
  n.root = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + c.hidden_size;
  n.total = n.layers + n.root;
  return n;
}

ParameterCounts count_lora_parameters(const model::ModelConfig& c, int64_t rank,
                                      const std::vector<std::string>& target_modules) {
  if (rank < 1) fail("--lora-rank must be at least 1, got {}", rank);
  std::vector<std::regex> targets;
  const auto& patterns = target_modules.empty() ? default_lora_target_modules() : target_modules;
  for (const auto& text : patterns) {
    try {
      targets.emplace_back(text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail("--lora-target-modules: '{}' is not a valid regular expression ({})", text, e.what());
    }
  }
  ParameterCounts n;
  std::vector<int64_t> per_layer(static_cast<size_t>(c.num_hidden_layers), 0);
  bool any = false;
  for (const auto& linear : linear_shapes(c)) {
    const bool selected = std::any_of(targets.begin(), targets.end(), [&](const std::regex& r) {
      return std::regex_match(linear.name, r);
    });
    if (!selected) continue;
    any = true;
    const int64_t adapter = product({rank, sum({linear.in, linear.out})});
    n.total = sum({n.total, adapter});
    if (linear.layer >= 0) per_layer[static_cast<size_t>(linear.layer)] += adapter;
  }
  if (!any) fail("--lora-target-modules matches no linear layer of the model");
  for (const int64_t layer : per_layer) {
    n.layers += layer;
    n.largest_layer = std::max(n.largest_layer, layer);
  }
  n.root = n.total - n.layers;
  return n;
}

// Per token of one layer, in elements of the compute dtype:
//   4h         the inputs of both RMSNorms and their outputs (the projections' inputs)
//   q + kv     qwen3 only: the inputs of q_norm and k_norm
//   q + 2kv    the rotated q, k and v the fused attention keeps
//   2q         the attention output (kept by the kernel) and its (B, T, heads*D) copy for o_proj
//   4i         gate and up outputs, silu(gate), and their product (down_proj's input)
// with h hidden, q = heads*head_dim, kv = kv_heads*head_dim, i intermediate. For Qwen3-8B that is
// 84,992 elements, 166 KiB in bf16 per token and layer; Korthikanti's 34h bytes without the score
// term would be 136 KiB for the same width with a 4h GeLU MLP.
int64_t activation_elements_per_token(const model::ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim();
  int64_t n = 4 * h + (q + 2 * kv) + 2 * q + 4 * c.intermediate_size;
  if (c.qk_norm) n += q + kv;
  return n;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  if (in.world_size < 1) fail("--world-size must be at least 1, got {}", in.world_size);
  if (in.compute_bytes != 2 && in.compute_bytes != 4)
    fail("memory plan: compute dtype of {} bytes (expected 2 or 4)", in.compute_bytes);
  if (in.micro_batch < 1) fail("--micro-batch-size must be at least 1, got {}", in.micro_batch);
  if (in.sequence_length < 1) fail("--max-length must be at least 1, got {}", in.sequence_length);

  const model::ModelConfig& cfg = in.model;
  const int64_t c = in.compute_bytes, w = in.world_size;
  const int64_t cf = in.frozen_bytes > 0 ? in.frozen_bytes : c;  // teacher/reference dtype
  MemoryPlan p;
  const ParameterCounts base = count_parameters(cfg);
  if (in.lora) {
    p.trainable = count_lora_parameters(cfg, in.lora->rank, in.lora->target_modules);
    p.parameters = {base.total + p.trainable.total, base.layers + p.trainable.layers,
                    base.root + p.trainable.root, base.largest_layer + p.trainable.largest_layer};
  } else {
    p.parameters = p.trainable = base;
  }
  const int64_t n = p.parameters.total, t = p.trainable.total;
  const int64_t t_layers = p.trainable.layers, t_root = p.trainable.root;
  const int64_t l_max = p.trainable.largest_layer;

  // The table of memory_plan.h. Sharded modes reduce-scatter float32 gradients into the rank's
  // slice (T*4/W) after the backward wrote compute-dtype ones: all of them (optimizer), or only
  // the root's, the layers' being scattered layer by layer (gradients, parameters).
  switch (in.shard) {
    case ShardMode::kNone:
      p.weights = n * 4;
      p.gradients = t * 4;
      p.moments = t * 8;
      break;
    case ShardMode::kOptimizer:
    case ShardMode::kGradients:
    case ShardMode::kParameters: {
      const bool layerwise = in.shard != ShardMode::kOptimizer;
      p.weights = (in.shard == ShardMode::kParameters ? n - t_layers : n) * c;
      p.gradients = (layerwise ? t_root : t) * c + ceil_div(t, w) * 4;
      p.master = ceil_div(t, w) * 4;
      p.moments = ceil_div(t, w) * 8;
      break;
    }
    case ShardMode::kCount:
      fail("memory plan: no shard mode");
  }
  // gradients and parameters modes always checkpoint (the trainer forces it).
  p.checkpointed = in.activation_checkpointing || in.shard == ShardMode::kGradients ||
                   in.shard == ShardMode::kParameters;

  if (in.frozen) {
    // A frozen copy in the compute dtype; with full sharding its layers are split like the
    // policy's and gathered one at a time.
    p.frozen = count_parameters(*in.frozen);
    p.frozen_weights = in.shard == ShardMode::kParameters
                           ? (p.frozen.root + ceil_div(p.frozen.layers, w)) * cf
                           : p.frozen.total * cf;
  }

  if (in.rollouts) {
    const auto& r = *in.rollouts;
    p.kv_cache = product({r.prompts_per_rank, r.group_size, r.sequence_tokens,
                          cfg.num_hidden_layers, 2, cfg.num_key_value_heads, cfg.head_dim, c});
    // Rollouts decode from whole weights: with full sharding the policy's layers are gathered
    // for the rollouts of a step, next to the KV cache.
    if (in.shard == ShardMode::kParameters) p.rollout_weights = t_layers * c;
  }

  const int64_t tokens = product({in.micro_batch, in.sequence_length});
  const int64_t per_layer = product({tokens, activation_elements_per_token(cfg), c});
  // Logits in float32 (the losses' log-softmax), and the teacher's for qat-kd.
  const int64_t logits = product({tokens, cfg.vocab_size, 4, in.frozen_logits ? 2 : 1});
  // QAT: each linear's fake-quantized weight is an input of its matmul, kept for the backward.
  const int64_t fake_quant = in.fake_quant ? product({layer_linear_weights(cfg), c}) : 0;
  p.activations_full = sum({product({per_layer + fake_quant, cfg.num_hidden_layers}), logits});
  // Checkpointed: each layer's input (hidden per token) plus one layer recomputed in full.
  p.activations_checkpointed = sum({product({tokens, cfg.hidden_size, c, cfg.num_hidden_layers}),
                                    per_layer, fake_quant, logits});
  p.activations = p.checkpointed ? p.activations_checkpointed : p.activations_full;

  if (in.shard == ShardMode::kParameters) {
    // One gathered layer and its compute-dtype gradients before they are scattered; the frozen
    // model gathers one of its layers the same way.
    p.transient = 2 * l_max * c + (in.frozen ? p.frozen.largest_layer * cf : 0);
  } else if (in.shard == ShardMode::kNone && c == 2) {
    // bf16 autocast caches a bf16 copy of every trainable float32 weight for the step.
    p.transient = t * 2;
  }

  p.total = sum({p.weights, p.gradients, p.master, p.moments, p.frozen_weights,
                 std::max(sum({p.kv_cache, p.rollout_weights}), sum({p.activations, p.transient}))});
  return p;
}

}  // namespace rqat::train
