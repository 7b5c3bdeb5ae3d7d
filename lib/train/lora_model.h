// Turning a model into a QLoRA student and back (issue 7).
//
// attach_lora: the selected linear layers get a LoraLinear adapter over their current layer (dense,
// fake-quantized or packed GPTQ) and every other parameter of the model is frozen, so the
// optimizer (trainable_parameters) sees exactly lora_A and lora_B of each adapted layer.
// merge_lora: each adapter is folded into a DenseLinear (W + scale * B A), so the model saves as a
// plain full-precision checkpoint that ptq can quantize again ("PTQ after RL").
// lora_state / save_lora_adapter: the adapters alone, as a PEFT adapter directory
// (adapter_model.safetensors + adapter_config.json) that peft.PeftModel.from_pretrained loads over
// the base model.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/decoder.h"
#include "model/lora_linear.h"

namespace rqat::train {

// All seven projections of every block (not lm_head).
std::vector<std::string> default_lora_target_modules();

// Wraps every linear layer (lm_head included when untied) whose full name matches one of
// `target_modules` entirely (std::regex ECMAScript, like PEFT's re.fullmatch; empty: the default
// above) in a LoraLinear, and freezes every other parameter. Returns the wrapped names in model
// order. rqat::Error naming --lora-target-modules when a regex is invalid or nothing matches, and
// naming the layer when it already has an adapter; bad options name their flag.
std::vector<std::string> attach_lora(model::CausalLM& model, const model::LoraOptions& options,
                                     const std::vector<std::string>& target_modules);

// Replaces every LoraLinear by a DenseLinear holding its effective_weight() and the base's bias,
// in the model's dtype (float32 for the usual float32 model; a bfloat16/float16 model gets the
// float32 sum rounded once, since its forward cannot multiply float32 weights) and frozen like the
// rest of the model. Returns the merged names in model order (empty when there were none).
std::vector<std::string> merge_lora(model::CausalLM& model);

// "base_model.model.<layer>.lora_A.weight" (rank, in) and ".lora_B.weight" (out, rank) of every
// adapter, float32, in model order (PEFT's adapter checkpoint names).
io::NamedTensors lora_state(model::CausalLM& model);

// Writes dir/adapter_model.safetensors (lora_state) and dir/adapter_config.json (peft_type LORA,
// task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, base_model_name_or_path). The
// config's target_modules lists the wrapped layers by full name rather than repeating the regexes:
// PEFT matches a list entry equal to a module name exactly, whereas regexes would be re-read by
// Python's re, whose dialect differs from std::regex in corners. `target_modules` must be the
// patterns the adapters were attached with and `options` their options (checked: every adapter
// matches a pattern and has this rank, alpha and dropout). Errors name `dir` when the model has no
// adapter.
void save_lora_adapter(model::CausalLM& model, const model::LoraOptions& options,
                       const std::vector<std::string>& target_modules,
                       const std::string& base_model, const std::filesystem::path& dir);

}  // namespace rqat::train
