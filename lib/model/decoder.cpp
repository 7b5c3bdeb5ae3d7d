// See decoder.h.
#include "model/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "io/error.h"
#include "model/activation_checkpoint.h"

namespace rqat::model {

namespace {

// allowed[b, 0, t, j]: key j is a real token at or before query t. Each query may also see itself,
// so rows of padding queries are never fully masked (which would make the softmax NaN).
at::Tensor attention_mask_for(const at::Tensor& query_index, const at::Tensor& key_valid,
                              int64_t key_length) {
  // query_index: (B, T) absolute key index of each query; key_valid: (B, key_length) bool
  auto keys = at::arange(key_length, query_index.options()).view({1, 1, -1});
  auto q = query_index.unsqueeze(-1);
  auto allowed = at::logical_and(keys <= q, key_valid.unsqueeze(1));
  allowed = at::logical_or(allowed, keys == q);
  return allowed.unsqueeze(1);
}

at::Tensor positions_from_mask(const at::Tensor& mask) {
  return (mask.to(at::kLong).cumsum(-1) - 1).clamp_min(0);
}

}  // namespace

Backbone::Backbone(const ModelConfig& c, const at::TensorOptions& options) {
  embed_tokens = register_module("embed_tokens",
                                 std::make_shared<Embedding>(c.vocab_size, c.hidden_size, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->push_back(std::make_shared<DecoderLayer>(c, options));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
}

CausalLM::CausalLM(const ModelConfig& config, const at::TensorOptions& options)
    : config_(config), options_(options), rotary_(config) {
  model = register_module("model", std::make_shared<Backbone>(config, options));
  if (!config.tie_word_embeddings) {
    lm_head = register_module("lm_head",
                              std::make_shared<DenseLinear>(config.hidden_size, config.vocab_size,
                                                            /*with_bias=*/false, options));
  }
}

at::Tensor CausalLM::run_layers(at::Tensor x, const AttentionContext& ctx) {
  for (size_t i = 0; i < model->layers->size(); ++i) {
    auto* layer = model->layers->ptr<DecoderLayer>(i).get();
    const auto index = static_cast<int64_t>(i);
    if ((activation_checkpointing_ || layer_scope_) && ctx.paged == nullptr) {
      BlockBrackets brackets;
      if (layer_scope_ != nullptr) {
        LayerScope* scope = layer_scope_;
        const auto pass = [](bool backward) {
          return backward ? LayerPass::kBackward : LayerPass::kForward;
        };
        brackets.before = [scope, index, pass](bool backward) { scope->enter(index, pass(backward)); };
        brackets.after = [scope, index, pass](bool backward) { scope->exit(index, pass(backward)); };
      }
      // The context is copied into the recompute closure: it must outlive this forward.
      x = checkpointed_block(
          [layer, ctx, index](const at::Tensor& in) { return layer->forward(in, ctx, index); }, x,
          brackets);
    } else if (layer_scope_ != nullptr) {
      layer_scope_->enter(index, LayerPass::kForward);
      x = layer->forward(x, ctx, index);
      layer_scope_->exit(index, LayerPass::kForward);
    } else {
      x = layer->forward(x, ctx, index);
    }
  }
  return model->norm->forward(x);
}

AttentionContext CausalLM::sequence_context(const at::Tensor& input_ids,
                                            const at::Tensor& attention_mask) {
  if (input_ids.dim() != 2) fail("input_ids must be (batch, steps), got {} dims", input_ids.dim());
  auto mask =
      attention_mask.defined() ? attention_mask.to(at::kBool) : at::ones_like(input_ids, at::kBool);
  AttentionContext ctx;
  std::tie(ctx.cos, ctx.sin) =
      rotary_.cos_sin(positions_from_mask(mask), options_.dtype().toScalarType());
  auto query_index =
      at::arange(input_ids.size(1), input_ids.options().dtype(at::kLong)).expand_as(input_ids);
  ctx.mask = attention_mask_for(query_index, mask, input_ids.size(1));
  ctx.key_length = input_ids.size(1);
  return ctx;
}

at::Tensor CausalLM::embed(const at::Tensor& input_ids) {
  return model->embed_tokens->forward(input_ids);
}

DecoderLayer& CausalLM::layer(int64_t index) {
  if (index < 0 || index >= num_layers())
    fail("decoder layer {} out of range (the model has {})", index, num_layers());
  return *model->layers->ptr<DecoderLayer>(static_cast<size_t>(index));
}

at::Tensor CausalLM::hidden_states(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  const auto ctx = sequence_context(input_ids, attention_mask);
  return run_layers(embed(input_ids), ctx);
}

at::Tensor CausalLM::logits(const at::Tensor& hidden) {
  return lm_head ? lm_head->forward(hidden) : at::linear(hidden, model->embed_tokens->weight);
}

at::Tensor CausalLM::forward_paged(const PagedStep& step, PagedKVCache& cache) {
  const int64_t batch = step.input_ids.size(0), steps = step.input_ids.size(1);
  AttentionContext ctx;
  ctx.paged = &cache;
  ctx.slot_mapping = step.slot_mapping;
  ctx.block_tables = step.block_tables;
  ctx.context_lens = step.context_lens;
  ctx.fresh_sequences = step.fresh_sequences;
  ctx.key_length = step.fresh_sequences ? steps : step.max_context;
  const auto dtype = options_.dtype().toScalarType();
  std::tie(ctx.cos, ctx.sin) = rotary_.cos_sin_lookup(step.positions, step.max_position, dtype);
  if (steps > 1) {
    // Key j is visible to the token at position p of row b when j <= p and j < context_lens[b]
    // (padding tokens repeat their row's last position, so they see that row's keys only).
    auto keys = at::arange(ctx.key_length, step.positions.options()).view({1, 1, -1});
    auto visible = (keys <= step.positions.unsqueeze(-1))
                       .logical_and_(keys < step.context_lens.to(at::kLong).view({batch, 1, 1}));
    ctx.mask = visible.unsqueeze(1);
  }
  auto hidden = run_layers(model->embed_tokens->forward(step.input_ids), ctx);
  if (steps > 1) {
    const auto index = step.last_index.view({batch, 1, 1}).expand({batch, 1, hidden.size(2)});
    hidden = hidden.gather(1, index);
  }
  return logits(hidden.select(1, 0));
}

PagedKVCache CausalLM::make_paged_cache(int64_t num_blocks, int64_t block_size) const {
  return PagedKVCache(config_, num_blocks, block_size, options_);
}

std::vector<LinearSlot> CausalLM::linear_layers(bool include_lm_head) {
  std::vector<LinearSlot> out;
  for (size_t i = 0; i < model->layers->size(); ++i) {
    auto layer = model->layers->ptr<DecoderLayer>(i);
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    layer->self_attn->collect_linears(prefix + "self_attn.", out);
    layer->mlp->collect_linears(prefix + "mlp.", out);
  }
  if (include_lm_head && lm_head) out.push_back(LinearSlot{"lm_head", this, "lm_head", &lm_head});
  return out;
}

void CausalLM::replace_linear(const LinearSlot& slot, std::shared_ptr<Linear> layer) {
  slot.owner->replace_module(slot.local_name, layer);
  *slot.layer = std::move(layer);
}

io::NamedTensors CausalLM::state_tensors() const {
  io::NamedTensors out;
  for (const auto& item : named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  for (const auto& item : named_buffers(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace rqat::model
