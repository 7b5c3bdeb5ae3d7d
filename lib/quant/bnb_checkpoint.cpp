// See bnb_checkpoint.h.
#include "quant/bnb_checkpoint.h"

#include <ATen/ATen.h>

#include <map>
#include <set>

#include "io/checkpoint.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/model_dir.h"

namespace rqat::quant {

namespace fs = std::filesystem;

namespace {

at::Tensor float_tensor(const float* values, int64_t n) {
  return at::tensor(std::vector<float>(values, values + n), at::kFloat);
}

// The bytes of a JSON text as a uint8 tensor (bitsandbytes' pack_dict_to_tensor).
at::Tensor json_bytes(const io::Json& json) {
  const std::string text = json.dump();
  auto out = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::copy(text.begin(), text.end(), out.data_ptr<uint8_t>());
  return out;
}

void append_layer(io::NamedTensors& tensors, const std::string& name, const Nf4Weight& q,
                  at::ScalarType dtype) {
  const std::string w = name + ".weight";
  tensors.emplace_back(w, q.packed.to(at::kCPU).contiguous().view({-1, 1}));
  tensors.emplace_back(w + ".absmax", q.double_quant ? q.absmax_codes.to(at::kCPU).contiguous()
                                                     : q.absmax.to(at::kCPU, at::kFloat));
  tensors.emplace_back(w + ".quant_map", float_tensor(kNf4Levels.data(), 16));
  io::Json state = {{"quant_type", "nf4"},
                    {"blocksize", q.block_size},
                    {"dtype", model::hf_dtype_name(dtype)},
                    {"shape", q.shape}};
  if (q.double_quant) {
    tensors.emplace_back(w + ".nested_absmax", q.nested_absmax.to(at::kCPU, at::kFloat));
    tensors.emplace_back(w + ".nested_quant_map", float_tensor(dynamic_map_signed().data(), 256));
    state["nested_blocksize"] = kNf4NestedBlockSize;
    state["nested_dtype"] = "float32";
    state["nested_offset"] = q.offset;
  }
  tensors.emplace_back(w + ".quant_state.bitsandbytes__nf4", json_bytes(state));
}

}  // namespace

void export_bnb_checkpoint(const model::CausalLM& model,
                           const std::vector<std::pair<std::string, Nf4Weight>>& layers,
                           const fs::path& dir, const BnbExportOptions& options) {
  if (layers.empty()) fail("{}: no NF4 layers to export", dir.string());
  std::map<std::string, const Nf4Weight*> by_weight;
  bool double_quant = false;
  for (const auto& [name, q] : layers) {
    by_weight[name + ".weight"] = &q;
    double_quant = double_quant || q.double_quant;
  }
  io::NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_tensors()) {
    const auto found = by_weight.find(name);
    if (found == by_weight.end()) {
      tensors.emplace_back(name, tensor.detach().to(at::kCPU, options.dtype).contiguous());
      continue;
    }
    const Nf4Weight& q = *found->second;
    if (tensor.sizes().vec() != q.shape)
      fail("{}: NF4 layer {} has shape {} but the model's weight is {}", dir.string(), name,
           c10::str(at::IntArrayRef(q.shape)), c10::str(tensor.sizes()));
    append_layer(tensors, name.substr(0, name.size() - 7), q, options.dtype);
    by_weight.erase(found);
  }
  if (!by_weight.empty())
    fail("{}: NF4 layer {} is not a weight of the model", dir.string(), by_weight.begin()->first);

  // The linear layers left in full precision, so that transformers keeps them as they are.
  std::set<std::string> quantized;
  for (const auto& [name, q] : layers) quantized.insert(name);
  // lm_head always, when not quantized: a model tied to its embeddings has no lm_head layer here,
  // but transformers would make one a 4-bit layer without weights to load.
  io::Json skip = io::Json::array();
  if (!quantized.count("lm_head")) skip.push_back("lm_head");
  for (const auto& slot : const_cast<model::CausalLM&>(model).linear_layers(true))
    if (!quantized.count(slot.name) && slot.name != "lm_head") skip.push_back(slot.name);
  const std::string dtype = model::hf_dtype_name(options.dtype);
  io::Json qc = {{"quant_method", "bitsandbytes"},
                 {"load_in_4bit", true},
                 {"load_in_8bit", false},
                 {"_load_in_4bit", true},
                 {"_load_in_8bit", false},
                 {"bnb_4bit_quant_type", "nf4"},
                 {"bnb_4bit_use_double_quant", double_quant},
                 {"bnb_4bit_compute_dtype", dtype},
                 {"bnb_4bit_quant_storage", "uint8"},
                 {"llm_int8_skip_modules", skip},
                 {"llm_int8_threshold", 6.0},
                 {"llm_int8_has_fp16_weight", false},
                 {"llm_int8_enable_fp32_cpu_offload", false}};
  model::ModelConfig config = model.config();
  config.torch_dtype = dtype;
  if (!config.raw.is_object()) config.raw = io::Json::object();
  config.raw["quantization_config"] = qc;
  // Weights first: config.json is what marks the directory as a (complete) checkpoint.
  io::write_checkpoint(dir, tensors, options.max_shard_bytes);
  model::save_model_config(config, dir);
}

}  // namespace rqat::quant
