// See layers.h.
#include "model/layers.h"

#include <ATen/ATen.h>

#include <cmath>

#include "model/rotary.h"
#include "ops/attention.h"
#include "ops/rms_norm.h"

namespace rqat::model {

namespace {

std::shared_ptr<Linear> make_linear(torch::nn::Module& owner, const char* name, int64_t in,
                                    int64_t out, bool bias, const at::TensorOptions& options) {
  return owner.register_module(name, std::make_shared<DenseLinear>(in, out, bias, options));
}

void add_slot(torch::nn::Module* owner, const std::string& prefix, const char* local,
              std::shared_ptr<Linear>& layer, std::vector<LinearSlot>& out) {
  out.push_back(LinearSlot{prefix + local, owner, local, &layer});
}

}  // namespace

Embedding::Embedding(int64_t vocab_size, int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({vocab_size, dim}, options));
}

at::Tensor Embedding::forward(const at::Tensor& ids) {
  return at::embedding(weight, ids);
}

RMSNorm::RMSNorm(int64_t dim, double eps, const at::TensorOptions& options) : eps(eps) {
  weight = register_parameter("weight", at::empty({dim}, options));
}

at::Tensor RMSNorm::forward(const at::Tensor& x) {
  return ops::rms_norm(x, weight, eps);
}

Attention::Attention(const ModelConfig& c, const at::TensorOptions& options)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  q_proj = make_linear(*this, "q_proj", c.hidden_size, c.q_dim(), c.attention_bias, options);
  k_proj = make_linear(*this, "k_proj", c.hidden_size, c.kv_dim(), c.attention_bias, options);
  v_proj = make_linear(*this, "v_proj", c.hidden_size, c.kv_dim(), c.attention_bias, options);
  o_proj = make_linear(*this, "o_proj", c.q_dim(), c.hidden_size, c.o_proj_bias, options);
  if (c.qk_norm) {
    q_norm =
        register_module("q_norm", std::make_shared<RMSNorm>(c.head_dim, c.rms_norm_eps, options));
    k_norm =
        register_module("k_norm", std::make_shared<RMSNorm>(c.head_dim, c.rms_norm_eps, options));
  }
}

void Attention::collect_linears(const std::string& prefix, std::vector<LinearSlot>& out) {
  add_slot(this, prefix, "q_proj", q_proj, out);
  add_slot(this, prefix, "k_proj", k_proj, out);
  add_slot(this, prefix, "v_proj", v_proj, out);
  add_slot(this, prefix, "o_proj", o_proj, out);
}

at::Tensor Attention::forward(const at::Tensor& x, const AttentionContext& ctx,
                              int64_t layer_index) {
  const int64_t batch = x.size(0), steps = x.size(1);
  // (B, T, heads * D) -> (B, T, heads, D); qwen3 normalizes each head before the rotation.
  auto q = q_proj->forward(x).view({batch, steps, heads_, head_dim_});
  auto k = k_proj->forward(x).view({batch, steps, kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({batch, steps, kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = apply_rotary(q.transpose(1, 2), ctx.cos, ctx.sin);  // (B, heads, T, D)
  k = apply_rotary(k.transpose(1, 2), ctx.cos, ctx.sin);  // (B, kv_heads, T, D)
  v = v.transpose(1, 2);

  if (ctx.cache != nullptr) {
    // One scatter per tensor writes every row's new keys at its own slot and positions; indices
    // (B, 1) and (B, T) around the head dimension address values laid out as (B, T, kv_heads, D).
    using at::indexing::Slice;
    auto& cache_k = ctx.cache->keys[layer_index];
    auto& cache_v = ctx.cache->values[layer_index];
    if (ctx.common_start >= 0) {  // the usual decode step: one block copy per tensor
      cache_k.narrow(0, 0, batch).narrow(2, ctx.common_start, steps).copy_(k);
      cache_v.narrow(0, 0, batch).narrow(2, ctx.common_start, steps).copy_(v);
    } else {
      const auto rows = ctx.slot_index.view({batch, 1});
      cache_k.index_put_({rows, Slice(), ctx.write_positions}, k.permute({0, 2, 1, 3}));
      cache_v.index_put_({rows, Slice(), ctx.write_positions}, v.permute({0, 2, 1, 3}));
    }
    if (ctx.leading_slots) {
      k = cache_k.narrow(0, 0, batch).narrow(2, 0, ctx.key_length);
      v = cache_v.narrow(0, 0, batch).narrow(2, 0, ctx.key_length);
    } else {
      k = cache_k.index_select(0, ctx.slot_index).narrow(2, 0, ctx.key_length);
      v = cache_v.index_select(0, ctx.slot_index).narrow(2, 0, ctx.key_length);
    }
  }
  at::Tensor out;
  if (steps == 1) {
    // Decode: one query per row. Grouping the query heads of each kv head into one batched matmul
    // avoids SDPA's per-call set-up and its repeat of k/v for GQA, which dominate at this size.
    const int64_t groups = heads_ / kv_heads_;
    auto scores = at::matmul(q.view({batch, kv_heads_, groups, head_dim_}), k.transpose(-1, -2));
    scores = scores.mul_(1.0 / std::sqrt(static_cast<double>(head_dim_))).add_(ctx.additive_mask);
    auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    out = at::matmul(probs, v).view({batch, heads_, 1, head_dim_});
  } else {
    out = ops::attention(q, k, v, ctx.mask);
  }
  out = out.transpose(1, 2).reshape({batch, steps, heads_ * head_dim_});
  return o_proj->forward(out);
}

Mlp::Mlp(const ModelConfig& c, const at::TensorOptions& options) {
  gate_proj =
      make_linear(*this, "gate_proj", c.hidden_size, c.intermediate_size, c.mlp_bias, options);
  up_proj = make_linear(*this, "up_proj", c.hidden_size, c.intermediate_size, c.mlp_bias, options);
  down_proj =
      make_linear(*this, "down_proj", c.intermediate_size, c.hidden_size, c.mlp_bias, options);
}

at::Tensor Mlp::forward(const at::Tensor& x) {
  return down_proj->forward(at::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

void Mlp::collect_linears(const std::string& prefix, std::vector<LinearSlot>& out) {
  add_slot(this, prefix, "gate_proj", gate_proj, out);
  add_slot(this, prefix, "up_proj", up_proj, out);
  add_slot(this, prefix, "down_proj", down_proj, out);
}

DecoderLayer::DecoderLayer(const ModelConfig& c, const at::TensorOptions& options) {
  input_layernorm = register_module(
      "input_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
  self_attn = register_module("self_attn", std::make_shared<Attention>(c, options));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
  mlp = register_module("mlp", std::make_shared<Mlp>(c, options));
}

at::Tensor DecoderLayer::forward(const at::Tensor& x, const AttentionContext& ctx,
                                 int64_t layer_index) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), ctx, layer_index);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

}  // namespace rqat::model
