// See decoder.h.
#include "model/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

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

// The decode path adds the mask to the scores: 0 where allowed, -inf elsewhere.
at::Tensor additive_from(const at::Tensor& allowed, at::ScalarType dtype) {
  return at::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
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
    if (activation_checkpointing_ && ctx.cache == nullptr) {
      // The context is copied into the recompute closure: it must outlive this forward.
      x = checkpointed_block(
          [layer, ctx, index](const at::Tensor& in) { return layer->forward(in, ctx, index); }, x);
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
  if (input_ids.size(1) == 1)
    ctx.additive_mask = additive_from(ctx.mask, options_.dtype().toScalarType());
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

at::Tensor CausalLM::forward_cached(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                    const std::vector<int64_t>& slots, KVCache& cache,
                                    bool last_only) {
  const int64_t batch = input_ids.size(0), steps = input_ids.size(1);
  if (static_cast<int64_t>(slots.size()) != batch) {
    fail("forward_cached: {} slots for {} rows", slots.size(), batch);
  }
  auto mask =
      attention_mask.defined() ? attention_mask.to(at::kBool) : at::ones_like(input_ids, at::kBool);
  AttentionContext ctx;
  ctx.cache = &cache;
  ctx.leading_slots = true;
  std::vector<int64_t> starts, first_position;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = slots[b];
    if (slot < 0 || slot >= cache.slots()) {
      fail("forward_cached: slot {} outside the cache's {}", slot, cache.slots());
    }
    const int64_t start = cache.length[slot];
    if (start + steps > cache.capacity()) {
      fail("KV cache slot {} is full: {} + {} tokens exceed its capacity {}", slot, start, steps,
           cache.capacity());
    }
    ctx.leading_slots = ctx.leading_slots && slot == b;
    starts.push_back(start);
    first_position.push_back(cache.next_position[slot]);
    ctx.key_length = std::max(ctx.key_length, start + steps);
  }
  const bool same_start =
      std::all_of(starts.begin(), starts.end(), [&](int64_t s) { return s == starts[0]; });
  if (ctx.leading_slots && same_start) ctx.common_start = starts[0];
  const auto device = input_ids.device();
  if (ctx.common_start >= 0) {
    cache.valid.narrow(0, 0, batch).narrow(1, ctx.common_start, steps).copy_(mask);
  } else {
    // Cache position of each new token: (B, T), and the slot of each row.
    ctx.write_positions = at::tensor(starts, at::kLong).to(device).unsqueeze(1) +
                          at::arange(steps, input_ids.options().dtype(at::kLong));
    ctx.slot_index = at::tensor(slots, at::kLong).to(device);
    cache.valid.index_put_({ctx.slot_index.view({batch, 1}), ctx.write_positions}, mask);
  }

  const auto dtype = options_.dtype().toScalarType();
  auto first = at::tensor(first_position, at::kLong).to(device).unsqueeze(1);
  if (steps == 1 && !attention_mask.defined() && ctx.common_start >= 0) {
    // The usual decode step: every row appends one real token at the same cache position, so all
    // its valid cached keys precede it and the mask is just the valid flags.
    const int64_t last_position = *std::max_element(first_position.begin(), first_position.end());
    std::tie(ctx.cos, ctx.sin) = rotary_.cos_sin_lookup(first, last_position, dtype);
    ctx.mask = cache.valid.narrow(0, 0, batch)
                   .narrow(1, 0, ctx.key_length)
                   .view({batch, 1, 1, ctx.key_length});
  } else {
    std::tie(ctx.cos, ctx.sin) = rotary_.cos_sin(positions_from_mask(mask) + first, dtype);
    auto key_valid = ctx.leading_slots ? cache.valid.narrow(0, 0, batch)
                                       : cache.valid.index_select(0, ctx.slot_index);
    auto write_positions = ctx.common_start >= 0
                               ? at::arange(steps, input_ids.options().dtype(at::kLong))
                                     .add_(ctx.common_start)
                                     .expand({batch, steps})
                               : ctx.write_positions;
    ctx.mask =
        attention_mask_for(write_positions, key_valid.narrow(1, 0, ctx.key_length), ctx.key_length);
  }
  if (steps == 1) ctx.additive_mask = additive_from(ctx.mask, dtype);

  auto hidden = run_layers(model->embed_tokens->forward(input_ids), ctx);
  // Without a mask every new token is real; otherwise count them (one copy to the host).
  const auto real_tokens = attention_mask.defined() ? mask.sum(1).to(at::kCPU) : at::Tensor();
  for (int64_t b = 0; b < batch; ++b) {
    cache.length[slots[b]] += steps;
    cache.next_position[slots[b]] +=
        real_tokens.defined() ? real_tokens.data_ptr<int64_t>()[b] : steps;
  }
  return logits(last_only ? hidden.narrow(1, steps - 1, 1) : hidden);
}

KVCache CausalLM::make_cache(int64_t slots, int64_t capacity) const {
  return KVCache(config_, slots, capacity, options_);
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
