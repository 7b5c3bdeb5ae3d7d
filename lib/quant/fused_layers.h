// The layers GPU engines fuse into one matrix. vLLM and SGLang load q_proj, k_proj and v_proj as
// one qkv_proj and gate_proj and up_proj as one gate_up_proj, and give a fused NVFP4 matrix one
// global scale (vLLM takes the largest of its parts' and warns when they differ): parts carrying
// different global scales would be served with other weights than the checkpoint holds.
// llm-compressor shares one global scale within each group; so does rqat, from the group's
// largest weight magnitude, and its compressed-tensors export refuses parts that differ.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "model/decoder.h"
#include "quant/quant_spec.h"

namespace rqat::quant {

// "model.layers.3.self_attn.k_proj" -> "model.layers.3.self_attn.qkv_proj",
// "model.layers.3.mlp.up_proj" -> "model.layers.3.mlp.gate_up_proj"; a layer fused with no other
// is its own group.
std::string fused_layer_group(const std::string& layer);

// On the nvfp4 grid (spec.fp_grid): the global scale of every layer `spec` quantizes,
// nvfp4_global_scale (quant/fp_grid.h) of the largest weight magnitude over its fused group's
// quantized layers. Empty on other grids.
std::map<std::string, float> shared_nvfp4_global_scales(model::CausalLM& model,
                                                        const QuantSpec& spec);

// `layer`'s scale in shared_nvfp4_global_scales' result, nullopt where it has none (the argument
// rtn_quantize and gptq_quantize take).
std::optional<float> shared_global_scale(const std::map<std::string, float>& scales,
                                         const std::string& layer);

// Fails, naming two layers of one fused group and `where`, when their scales (layer -> scale)
// differ.
void check_fused_scales_shared(const std::map<std::string, float>& scales, std::string_view where);

}  // namespace rqat::quant
