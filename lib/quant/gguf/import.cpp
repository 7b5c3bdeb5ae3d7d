// See import.h.
#include "quant/gguf/import.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <map>
#include <set>

#include "io/checkpoint.h"
#include "io/error.h"
#include "io/gguf_file.h"
#include "io/json_text.h"
#include "io/manifest.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/grid_blocks.h"
#include "quant/gguf/names.h"
#include "quant/quant_state.h"

namespace rqat::quant {

namespace {

template <class T>
T required(const io::GgufContents& c, const std::string& key, const std::string& where) {
  const io::GgufValue* v = c.find(key);
  if (v == nullptr) fail("{}: GGUF metadata {} is missing", where, key);
  const T* typed = std::get_if<T>(v);
  if (typed == nullptr) fail("{}: GGUF metadata {} has another type than rqat expects", where, key);
  return *typed;
}

const io::GgufTensor* find_tensor(const io::GgufContents& c, const std::string& name) {
  for (const auto& t : c.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// config.json from llama.cpp's metadata, for a GGUF rqat did not write.
io::Json config_from_metadata(const io::GgufContents& c, const std::string& where) {
  const std::string arch = required<std::string>(c, "general.architecture", where);
  if (arch != "qwen2" && arch != "qwen3" && arch != "llama")
    fail("{}: architecture '{}' (rqat imports qwen2, qwen3 and llama)", where, arch);
  if (find_tensor(c, "rope_freqs.weight"))
    fail("{}: llama3 rope scaling (rope_freqs) without rqat's source config cannot be imported",
         where);
  const auto u = [&](const std::string& key) {
    return required<uint32_t>(c, arch + "." + key, where);
  };
  const auto tokens = required<std::vector<std::string>>(c, "tokenizer.ggml.tokens", where);
  io::Json j = {
      {"model_type", arch},
      {"hidden_size", u("embedding_length")},
      {"intermediate_size", u("feed_forward_length")},
      {"num_hidden_layers", u("block_count")},
      {"num_attention_heads", u("attention.head_count")},
      {"num_key_value_heads", u("attention.head_count_kv")},
      {"max_position_embeddings", u("context_length")},
      {"vocab_size", tokens.size()},
      {"rms_norm_eps", required<float>(c, arch + ".attention.layer_norm_rms_epsilon", where)},
      {"tie_word_embeddings", find_tensor(c, "output.weight") == nullptr}};
  if (const auto* v = c.find(arch + ".attention.key_length"))
    if (const auto* d = std::get_if<uint32_t>(v)) j["head_dim"] = *d;
  if (const auto* v = c.find(arch + ".rope.freq_base"))
    if (const auto* base = std::get_if<float>(v)) j["rope_theta"] = *base;
  if (arch == "llama" && find_tensor(c, "blk.0.attn_q.bias")) j["attention_bias"] = true;
  for (const char* key : {"bos", "eos"})
    if (const auto* v = c.find(fmt::format("tokenizer.ggml.{}_token_id", key)))
      if (const auto* id = std::get_if<uint32_t>(v)) j[fmt::format("{}_token_id", key)] = *id;
  return j;
}

}  // namespace

void import_gguf(const std::filesystem::path& file, const std::filesystem::path& out_dir,
                 const std::optional<std::filesystem::path>& tokenizer_dir) {
  const std::string where = file.string();
  const io::GgufContents contents = io::read_gguf(file);
  io::Json config_json;
  if (const auto* source = contents.find("rqat.source_config");
      source && std::holds_alternative<std::string>(*source)) {
    if (auto problem = io::parse_json_into(std::get<std::string>(*source), config_json))
      fail("{}: rqat.source_config: {}", where, *problem);
  } else {
    config_json = config_from_metadata(contents, where);
  }
  const model::ModelConfig config = model::ModelConfig::from_json(config_json, where);
  io::NamedTensors tensors;
  // The decoder layers' matrices on their grids, kept when they all share one type.
  std::map<std::string, QuantizedWeight> grid_layers;
  std::set<io::GgufType> layer_types;
  for (const auto& t : contents.tensors) {
    if (t.name == "rope_freqs.weight") continue;  // rebuilt from config.json's rope_scaling
    const std::string name = hf_tensor_name(t.name);
    if (name.empty()) fail("{}: tensor {} has no Hugging Face name rqat knows", where, t.name);
    at::Tensor value = dequantize_gguf_tensor(t.type, t.data, t.shape);
    const bool layer_matrix = value.dim() == 2 && name.starts_with("model.layers.");
    std::optional<QuantizedWeight> grid;
    if (layer_matrix) {
      layer_types.insert(t.type);
      if (has_gguf_grid(t.type))
        grid = gguf_grid_from_blocks(t.type, t.data, t.shape[0], t.shape[1]);
    }
    if (const auto heads =
            rope_reordered_heads(name, config.family == model::Family::kLlama,
                                 config.num_attention_heads, config.num_key_value_heads)) {
      value = deinterleave_rope_rows(value, *heads);
      if (grid) grid = select_rows(*grid, rope_row_order(grid->out_features(), *heads, false));
    }
    if (const std::optional<std::string> layer = weight_layer_name(name); grid && layer)
      grid_layers.emplace(*layer, std::move(*grid));
    tensors.emplace_back(name, value);
  }
  model::ModelConfig saved = config;
  saved.torch_dtype = "float32";
  model::save_model_config(saved, out_dir);
  io::write_checkpoint(out_dir, tensors, 0);
  // The manifest says what the directory came from, and its grid (as a ptq artifact's does), so
  // that reports label an evaluation of the import with the file's bits.
  io::Manifest manifest;
  manifest.tool = "rqat convert";
  manifest.inputs["gguf"] = file.string();
  manifest.config["gguf_layer_types"] = io::Json::array();
  for (const auto type : layer_types)
    manifest.config["gguf_layer_types"].push_back(std::string(enum_name(type)));
  if (layer_types.size() == 1 && !grid_layers.empty()) {
    QuantState state;
    state.spec.use_gguf_grid(*layer_types.begin());
    state.layers = std::move(grid_layers);
    save_quant_state(out_dir, state);
    manifest.config["quant"] = state.spec.to_json();
  }
  if (tokenizer_dir) model::copy_tokenizer_files(*tokenizer_dir, out_dir);
  io::write_manifest(out_dir, manifest);
}

}  // namespace rqat::quant
