// See lora_model.h.
#include "train/lora_model.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <regex>

#include "io/error.h"
#include "io/json_file.h"
#include "model/linear.h"

namespace rqat::train {

namespace {

struct TargetPattern {
  std::string text;
  std::regex regex;
};

std::vector<TargetPattern> compile_targets(const std::vector<std::string>& target_modules) {
  const auto& patterns = target_modules.empty() ? default_lora_target_modules() : target_modules;
  std::vector<TargetPattern> out;
  for (const auto& text : patterns) {
    try {
      out.push_back({text, std::regex(text, std::regex::ECMAScript)});
    } catch (const std::regex_error& e) {
      fail("--lora-target-modules: '{}' is not a valid regular expression ({})", text, e.what());
    }
  }
  return out;
}

bool matches_any(const std::string& name, const std::vector<TargetPattern>& targets) {
  for (const auto& t : targets)
    if (std::regex_match(name, t.regex)) return true;
  return false;
}

std::string joined(const std::vector<TargetPattern>& targets) {
  std::string out;
  for (const auto& t : targets) out += (out.empty() ? "'" : ", '") + t.text + "'";
  return out;
}

struct AdapterSlot {
  model::LinearSlot slot;
  std::shared_ptr<model::LoraLinear> lora;
};

std::vector<AdapterSlot> adapters_of(model::CausalLM& model) {
  std::vector<AdapterSlot> out;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true))
    if (auto lora = std::dynamic_pointer_cast<model::LoraLinear>(*slot.layer))
      out.push_back({slot, std::move(lora)});
  return out;
}

}  // namespace

std::vector<std::string> default_lora_target_modules() {
  return {R"(.*\.(q|k|v|o|gate|up|down)_proj)"};
}

std::vector<std::string> attach_lora(model::CausalLM& model, const model::LoraOptions& options,
                                     const std::vector<std::string>& target_modules) {
  options.validate();
  const auto targets = compile_targets(target_modules);
  const auto slots = model.linear_layers(/*include_lm_head=*/true);
  std::vector<const model::LinearSlot*> selected;
  for (const auto& slot : slots) {
    if (!matches_any(slot.name, targets)) continue;
    if (std::dynamic_pointer_cast<model::LoraLinear>(*slot.layer))
      fail("--lora-target-modules: layer {} already has a LoRA adapter", slot.name);
    selected.push_back(&slot);
  }
  if (selected.empty())
    fail("--lora-target-modules {} matches no linear layer of the model (names look like {})",
         joined(targets), slots.empty() ? std::string("<none>") : slots.front().name);

  // QLoRA trains only the adapters: embeddings, norms, lm_head and every base layer stay frozen.
  for (auto& p : model.parameters(/*recurse=*/true)) p.requires_grad_(false);
  std::vector<std::string> wrapped;
  for (const auto* slot : selected) {
    model.replace_linear(*slot,
                         std::make_shared<model::LoraLinear>(*slot->layer, options, slot->name));
    wrapped.push_back(slot->name);
  }
  return wrapped;
}

std::vector<std::string> merge_lora(model::CausalLM& model) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> merged;
  for (const auto& [slot, lora] : adapters_of(model)) {
    const at::Tensor weight = lora->effective_weight();
    const auto bias = lora->bias();
    auto dense = std::make_shared<model::DenseLinear>(
        lora->in_features(), lora->out_features(), bias.has_value(),
        at::TensorOptions().dtype(model.options().dtype()).device(weight.device()));
    dense->assign_weight(weight);
    if (bias) dense->assign_bias(bias->detach());
    for (auto& p : dense->parameters()) p.requires_grad_(false);
    model.replace_linear(slot, dense);
    merged.push_back(slot.name);
  }
  return merged;
}

io::NamedTensors lora_state(model::CausalLM& model) {
  io::NamedTensors out;
  for (const auto& [slot, lora] : adapters_of(model)) {
    const std::string prefix = "base_model.model." + slot.name;
    out.emplace_back(prefix + ".lora_A.weight", lora->lora_A().detach());
    out.emplace_back(prefix + ".lora_B.weight", lora->lora_B().detach());
  }
  return out;
}

void save_lora_adapter(model::CausalLM& model, const model::LoraOptions& options,
                       const std::vector<std::string>& target_modules,
                       const std::string& base_model, const std::filesystem::path& dir) {
  options.validate();
  const auto targets = compile_targets(target_modules);
  const auto adapters = adapters_of(model);
  if (adapters.empty()) fail("{}: the model has no LoRA adapter to save", dir.string());
  io::Json names = io::Json::array();
  for (const auto& [slot, lora] : adapters) {
    if (!matches_any(slot.name, targets))
      fail("--lora-target-modules {} does not select the adapted layer {}", joined(targets),
           slot.name);
    // The config describes every adapter with one (r, lora_alpha, lora_dropout).
    const auto& own = lora->options();
    if (own.rank != options.rank || own.alpha != options.alpha || own.dropout != options.dropout)
      fail("{}: layer {} has rank {}, alpha {}, dropout {} but the adapter config says {}, {}, {}",
           dir.string(), slot.name, own.rank, own.alpha, own.dropout, options.rank, options.alpha,
           options.dropout);
    names.push_back(slot.name);
  }

  io::Json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", options.rank},
      {"lora_alpha", options.alpha},
      {"lora_dropout", options.dropout},
      {"target_modules", names},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"init_lora_weights", true},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"inference_mode", true},
  };
  std::filesystem::create_directories(dir);
  io::save_safetensors(dir / "adapter_model.safetensors", lora_state(model));
  io::write_json_file(dir / "adapter_config.json", config);
}

}  // namespace rqat::train
