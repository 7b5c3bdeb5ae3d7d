// See fused_layers.h.
#include "quant/fused_layers.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "io/error.h"
#include "quant/fp_grid.h"

namespace rqat::quant {

std::string fused_layer_group(const std::string& layer) {
  struct Fusion {
    std::string_view part, fused;
  };
  static constexpr Fusion kFusions[] = {{"self_attn.q_proj", "self_attn.qkv_proj"},
                                        {"self_attn.k_proj", "self_attn.qkv_proj"},
                                        {"self_attn.v_proj", "self_attn.qkv_proj"},
                                        {"mlp.gate_proj", "mlp.gate_up_proj"},
                                        {"mlp.up_proj", "mlp.gate_up_proj"}};
  for (const auto& [part, fused] : kFusions) {
    if (!layer.ends_with(part)) continue;
    const size_t prefix = layer.size() - part.size();
    if (prefix != 0 && layer[prefix - 1] != '.') continue;
    return layer.substr(0, prefix) + std::string(fused);
  }
  return layer;
}

std::map<std::string, float> shared_nvfp4_global_scales(model::CausalLM& model,
                                                        const QuantSpec& spec) {
  std::map<std::string, float> scales;
  if (spec.fp_grid != FpGrid::kNvfp4) return scales;
  at::NoGradGuard no_grad;
  std::map<std::string, float> group_amax;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    const float amax = (*slot.layer)->effective_weight().detach().abs().max().item<float>();
    float& max = group_amax[fused_layer_group(slot.name)];
    max = std::max(max, amax);
    scales[slot.name] = 0;  // filled below
  }
  for (auto& [name, scale] : scales)
    scale = nvfp4_global_scale(group_amax.at(fused_layer_group(name)));
  return scales;
}

std::optional<float> shared_global_scale(const std::map<std::string, float>& scales,
                                         const std::string& layer) {
  const auto it = scales.find(layer);
  return it == scales.end() ? std::nullopt : std::optional<float>(it->second);
}

void check_fused_scales_shared(const std::map<std::string, float>& scales, std::string_view where) {
  std::map<std::string, std::pair<std::string, float>> first_of_group;
  for (const auto& [name, scale] : scales) {
    const auto [it, inserted] = first_of_group.try_emplace(fused_layer_group(name), name, scale);
    if (!inserted && it->second.second != scale)
      fail(
          "{}: {} and {} have nvfp4 global scales {} and {}, but GPU engines fuse them into {} "
          "with one global scale (it would serve other weights); requantize with this rqat, "
          "which shares one",
          where, it->second.first, name, it->second.second, scale, it->first);
  }
}

}  // namespace rqat::quant
