// See names.h.
#include "quant/gguf/names.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

namespace rqat::quant {

namespace {

// Hugging Face layer parts and llama.cpp's names for them.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
    {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};
constexpr std::pair<std::string_view, std::string_view> kModelNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// "<prefix><layer>.<rest>" -> (layer, rest), or empty.
std::pair<std::string, std::string> split_layer(const std::string& name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return {};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return {};
  return {name.substr(prefix.size(), dot - prefix.size()), name.substr(dot + 1)};
}

std::vector<int64_t> head_shape(const at::Tensor& w, int64_t heads, bool interleaved) {
  const int64_t d = w.size(0) / heads;
  std::vector<int64_t> shape =
      interleaved ? std::vector<int64_t>{heads, d / 2, 2} : std::vector<int64_t>{heads, 2, d / 2};
  for (int64_t i = 1; i < w.dim(); ++i) shape.push_back(w.size(i));
  return shape;
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  for (const auto& [from, to] : kModelNames)
    if (hf == from) return std::string(to);
  const auto [layer, rest] = split_layer(hf, "model.layers.");
  for (const auto& [from, to] : kLayerNames)
    for (const char* suffix : {".weight", ".bias"})
      if (!layer.empty() && rest == std::string(from) + suffix)
        return fmt::format("blk.{}.{}{}", layer, to, suffix);
  return "";
}

std::optional<std::string> weight_layer_name(const std::string& hf_name) {
  constexpr std::string_view kSuffix = ".weight";
  if (!hf_name.ends_with(kSuffix)) return std::nullopt;
  return hf_name.substr(0, hf_name.size() - kSuffix.size());
}

std::string hf_tensor_name(const std::string& gguf) {
  for (const auto& [from, to] : kModelNames)
    if (gguf == to) return std::string(from);
  const auto [layer, rest] = split_layer(gguf, "blk.");
  for (const auto& [from, to] : kLayerNames)
    for (const char* suffix : {".weight", ".bias"})
      if (!layer.empty() && rest == std::string(to) + suffix)
        return fmt::format("model.layers.{}.{}{}", layer, from, suffix);
  return "";
}

at::Tensor interleave_rope_rows(const at::Tensor& w, int64_t heads) {
  return w.reshape(head_shape(w, heads, false)).transpose(1, 2).reshape(w.sizes()).contiguous();
}

at::Tensor deinterleave_rope_rows(const at::Tensor& w, int64_t heads) {
  return w.reshape(head_shape(w, heads, true)).transpose(1, 2).reshape(w.sizes()).contiguous();
}

at::Tensor rope_row_order(int64_t rows, int64_t heads, bool interleave) {
  const at::Tensor index = at::arange(rows, at::kLong).unsqueeze(1);
  return (interleave ? interleave_rope_rows(index, heads) : deinterleave_rope_rows(index, heads))
      .squeeze(1);
}

std::optional<int64_t> rope_reordered_heads(const std::string& hf_name, bool llama,
                                            int64_t query_heads, int64_t kv_heads) {
  if (!llama) return std::nullopt;
  if (hf_name.find("self_attn.q_proj.") != std::string::npos) return query_heads;
  if (hf_name.find("self_attn.k_proj.") != std::string::npos) return kv_heads;
  return std::nullopt;
}

}  // namespace rqat::quant
