// See layers.h.
#include "model/layers.h"

#include <ATen/ATen.h>

#include <cmath>

#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"

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

at::Tensor Embedding::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

RMSNorm::RMSNorm(int64_t dim, double eps, const at::TensorOptions& options) : eps(eps) {
  weight = register_parameter("weight", at::empty({dim}, options));
}

at::Tensor RMSNorm::forward(const at::Tensor& x) { return ops::rms_norm(x, weight, eps); }

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
  q = ops::rotary(q.transpose(1, 2), ctx.cos, ctx.sin);  // (B, heads, T, D)
  k = ops::rotary(k.transpose(1, 2), ctx.cos, ctx.sin);  // (B, kv_heads, T, D)
  v = v.transpose(1, 2);

  if (ctx.paged != nullptr) return o_proj->forward(paged_attention(q, k, v, ctx, layer_index));
  auto out = ops::attention(q, k, v, ctx.mask);
  out = out.transpose(1, 2).reshape({batch, steps, heads_ * head_dim_});
  return o_proj->forward(out);
}

at::Tensor Attention::paged_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const AttentionContext& ctx, int64_t layer_index) {
  const int64_t batch = q.size(0), steps = q.size(2);
  auto& pool_k = ctx.paged->keys[layer_index];
  auto& pool_v = ctx.paged->values[layer_index];
  // (B, kv, T, D) -> (B * T, kv, D) rows of the pool viewed as (blocks * block_size, kv, D).
  pool_k.view({-1, kv_heads_, head_dim_})
      .index_copy_(0, ctx.slot_mapping, k.transpose(1, 2).reshape({-1, kv_heads_, head_dim_}));
  pool_v.view({-1, kv_heads_, head_dim_})
      .index_copy_(0, ctx.slot_mapping, v.transpose(1, 2).reshape({-1, kv_heads_, head_dim_}));
  at::Tensor out;
  if (steps == 1) {
    out = ops::paged_decode_attention(q.reshape({batch, heads_, head_dim_}), pool_k, pool_v,
                                      ctx.block_tables, ctx.context_lens)
              .view({batch, heads_, 1, head_dim_});
  } else if (ctx.fresh_sequences) {
    out = ops::attention(q, k, v, ctx.mask);
  } else {
    out = ops::attention(q, ops::gather_paged(pool_k, ctx.block_tables, ctx.key_length),
                         ops::gather_paged(pool_v, ctx.block_tables, ctx.key_length), ctx.mask);
  }
  return out.transpose(1, 2).reshape({batch, steps, heads_ * head_dim_});
}

Mlp::Mlp(const ModelConfig& c, const at::TensorOptions& options) {
  gate_proj =
      make_linear(*this, "gate_proj", c.hidden_size, c.intermediate_size, c.mlp_bias, options);
  up_proj = make_linear(*this, "up_proj", c.hidden_size, c.intermediate_size, c.mlp_bias, options);
  down_proj =
      make_linear(*this, "down_proj", c.intermediate_size, c.hidden_size, c.mlp_bias, options);
}

at::Tensor Mlp::forward(const at::Tensor& x) {
  return down_proj->forward(ops::swiglu(gate_proj->forward(x), up_proj->forward(x)));
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
