// See import.h.
#include "quant/compressed_tensors/import.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string_view>

#include "io/artifact.h"
#include "io/checkpoint.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/model_dir.h"
#include "quant/compressed_tensors/tensors.h"

namespace rqat::quant {

namespace fs = std::filesystem;

namespace {

// The parts of a quantized layer; activation and KV-cache quantization parameters that rqat does
// not model are dropped (an NVFP4 W4A4 layer's input_global_scale is kept: see below).
constexpr std::string_view kLayerParts[] = {"weight_packed", "weight_scale", "weight_shape",
                                            "weight_zero_point", "weight_global_scale"};
constexpr std::string_view kDroppedParts[] = {
    "input_scale", "input_zero_point", "input_global_scale", "output_scale", "k_scale", "v_scale"};

std::pair<std::string, std::string> split_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

template <size_t N>
bool one_of(std::string_view s, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

std::string regex_escaped(const std::string& name) {
  std::string out;
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') out += '\\';
    out += c;
  }
  return out;
}

// The spec of the scheme; include: the default when it selects exactly the quantized layers among
// the checkpoint's matrices, else their names.
QuantSpec spec_of(const CtScheme& scheme, const std::set<std::string>& quantized,
                  const std::set<std::string>& matrices) {
  QuantSpec spec;
  if (const auto grid = scheme.fp_grid()) {
    spec.use_fp_grid(*grid);
  } else {
    spec.bits = scheme.bits;
    spec.group_size = scheme.group_size;
    spec.symmetric = scheme.symmetric;
  }
  for (const auto& m : matrices) {
    if (spec.quantizes(m) != (quantized.count(m) > 0)) {
      spec.include.clear();
      for (const auto& q : quantized) spec.include.push_back(regex_escaped(q));
      break;
    }
  }
  return spec;
}

}  // namespace

CompressedTensorsModel read_compressed_tensors(const fs::path& dir) {
  const io::Artifact artifact = io::Artifact::open(dir);
  const fs::path config_file = artifact.path(io::kConfigFile);
  io::Json json = artifact.config;
  if (!json.is_object() || !json.contains("quantization_config"))
    fail("{}: no quantization_config (not a compressed-tensors checkpoint)", config_file.string());
  CompressedTensorsModel m;
  const CtConfig ct = ct_config_from_json(json["quantization_config"], config_file.string());
  m.scheme = ct.scheme;
  json.erase("quantization_config");
  m.config = model::ModelConfig::from_json(json, config_file.string());
  m.config.torch_dtype = "float32";
  m.config.generation = artifact.generation_config;

  const io::CheckpointReader reader(dir);
  const std::string where = reader.files().size() == 1 ? reader.files().front()->path().string()
                                                       : (dir / "model-*.safetensors").string();
  // The layers: where weight_packed is, or (float-quantized) an fp8 weight.
  std::map<std::string, CtLayerTensors> layers;
  for (const auto& name : reader.names()) {
    const auto [module, suffix] = split_name(name);
    const bool packed = suffix == "weight_packed";
    const bool fp8 = suffix == "weight" && m.scheme.format == CtFormat::kFloatQuantized &&
                     reader.tensor(name).scalar_type() == at::kFloat8_e4m3fn;
    if (packed || fp8) layers[module];
  }
  if (layers.empty())
    fail("{}: no quantized layer (no NAME.weight_packed{})", where,
         m.scheme.format == CtFormat::kFloatQuantized ? ", no float8_e4m3fn NAME.weight" : "");
  std::set<std::string> matrices;
  for (const auto& name : reader.names()) {
    const auto [module, suffix] = split_name(name);
    const auto layer = layers.find(module);
    // NVFP4 activations' static global scale is the layer's (the dynamic ones have none).
    const bool input_global =
        suffix == "input_global_scale" && m.scheme.activations == FpGrid::kNvfp4;
    if (layer != layers.end() &&
        (one_of(suffix, kLayerParts) || suffix == "weight" || input_global)) {
      if (suffix == "weight" && m.scheme.format != CtFormat::kFloatQuantized)
        fail("{}: layer {} is stored both packed (weight_packed) and dense (weight)", where,
             module);
      layer->second.emplace(suffix, reader.tensor(name));
      continue;
    }
    if (one_of(suffix, kDroppedParts)) continue;
    if (one_of(suffix, kLayerParts))
      fail("{}: tensor {} belongs to no packed layer ({}.weight_packed is missing)", where, name,
           module);
    at::Tensor t = reader.tensor(name);
    if (!at::isFloatingType(t.scalar_type()))
      fail("{}: tensor {} is {}, expected a float dtype (a full-precision tensor)", where, name,
           c10::toString(t.scalar_type()));
    if (t.dim() == 2 && suffix == "weight") matrices.insert(module);
    m.tensors.emplace_back(name, t.to(at::kFloat));
  }
  std::set<std::string> quantized;
  for (auto& [module, parts] : layers) {
    QuantizedWeight w = ct_layer_from_tensors(parts, m.scheme, where, module);
    m.tensors.emplace_back(module + ".weight", w.dequantize());
    m.state.layers.emplace(module, std::move(w));
    quantized.insert(module);
    matrices.insert(module);
  }
  m.state.spec = spec_of(m.scheme, quantized, matrices);
  m.state.spec.activations = m.scheme.activations;
  m.unread_activations = ct.unread_activations;
  return m;
}

CompressedTensorsModel import_compressed_tensors(const fs::path& dir, const fs::path& out_dir) {
  CompressedTensorsModel m = read_compressed_tensors(dir);
  fs::create_directories(out_dir);
  io::write_checkpoint(out_dir, m.tensors, 0);
  save_quant_state(out_dir, m.state);
  model::copy_tokenizer_files(dir, out_dir);
  // config.json last: it marks the directory as a (complete) model.
  model::save_model_config(m.config, out_dir);
  return m;
}

}  // namespace rqat::quant
