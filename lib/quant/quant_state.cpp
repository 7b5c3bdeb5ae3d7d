#include "quant/quant_state.h"

#include <cmath>
#include <set>
#include <string_view>

#include "io/error.h"
#include "io/json_file.h"
#include "io/json_text.h"
#include "io/safetensors.h"

namespace rqat::quant {

void save_quant_state(const std::filesystem::path& dir, const QuantState& state) {
  io::NamedTensors tensors;
  for (const auto& [name, q] : state.layers) {
    q.validate(name);
    tensors.emplace_back(name + ".codes", q.codes.to(at::kByte).cpu());
    tensors.emplace_back(name + ".scales", q.scales.to(at::kFloat).cpu());
    tensors.emplace_back(name + ".zeros", q.zeros.to(at::kFloat).cpu());
    tensors.emplace_back(name + ".g_idx", q.g_idx.to(at::kInt).cpu());
    if (q.super_scales.defined())
      tensors.emplace_back(name + ".super_scales", q.super_scales.to(at::kFloat).cpu());
    if (q.input_global_scale.defined())
      tensors.emplace_back(name + ".input_global_scale", q.input_global_scale.cpu());
  }
  std::filesystem::create_directories(dir);
  io::save_safetensors(dir / kQuantStateFile, tensors,
                       {{"format", "pt"}, {"rqat.quant_spec", state.spec.to_json().dump()}});
}

namespace {

QuantSpec spec_of(const io::SafetensorsFile& file, const std::filesystem::path& path) {
  const auto spec_text = file.metadata().find("rqat.quant_spec");
  if (spec_text == file.metadata().end()) fail("{}: metadata lacks rqat.quant_spec", path.string());
  io::Json spec_json;
  if (auto problem = io::parse_json_into(spec_text->second, spec_json))
    fail("{}: rqat.quant_spec: {}", path.string(), *problem);
  return QuantSpec::from_json(spec_json, path.string() + ": rqat.quant_spec");
}

}  // namespace

std::optional<QuantSpec> read_quant_spec(const std::filesystem::path& dir) {
  const auto path = dir / kQuantStateFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  return spec_of(*io::SafetensorsFile::open(path), path);
}

std::map<std::string, at::Tensor> read_input_global_scales(const std::filesystem::path& dir) {
  std::map<std::string, at::Tensor> scales;
  const auto path = dir / kQuantStateFile;
  if (!std::filesystem::exists(path)) return scales;
  const auto file = io::SafetensorsFile::open(path);
  static constexpr std::string_view kSuffix = ".input_global_scale";
  for (const auto& entry : file->entries()) {
    if (!entry.name.ends_with(kSuffix)) continue;
    const std::string name = entry.name.substr(0, entry.name.size() - kSuffix.size());
    const at::Tensor t = file->tensor(entry.name).clone();
    validate_input_global_scale(t, path.string() + ": " + entry.name);
    scales.emplace(name, t);
  }
  return scales;
}

QuantState load_quant_state(const std::filesystem::path& dir) {
  const auto path = dir / kQuantStateFile;
  if (!std::filesystem::exists(path))
    fail("{}: no quantized state in this directory", path.string());
  const auto file = io::SafetensorsFile::open(path);
  QuantState state;
  state.spec = spec_of(*file, path);
  std::set<std::string> names;
  for (const auto& entry : file->entries()) {
    const auto dot = entry.name.rfind('.');
    if (dot == std::string::npos) fail("{}: unexpected tensor {}", path.string(), entry.name);
    names.insert(entry.name.substr(0, dot));
  }
  for (const auto& name : names) {
    QuantizedWeight q;
    for (const char* part : {"codes", "scales", "zeros", "g_idx"})
      if (!file->contains(name + "." + part))
        fail("{}: layer {} lacks {}.{}", path.string(), name, name, part);
    q.codes = file->tensor(name + ".codes").clone();
    q.scales = file->tensor(name + ".scales").clone();
    q.zeros = file->tensor(name + ".zeros").clone();
    q.g_idx = file->tensor(name + ".g_idx").clone();
    if (file->contains(name + ".super_scales"))
      q.super_scales = file->tensor(name + ".super_scales").clone();
    if (file->contains(name + ".input_global_scale"))
      q.input_global_scale = file->tensor(name + ".input_global_scale").clone();
    q.bits = state.spec.bits;
    q.group_size = state.spec.group_size;
    q.gguf_grid = state.spec.gguf_grid;
    q.fp_grid = state.spec.fp_grid;
    q.validate(path.string() + ": " + name);
    state.layers.emplace(name, std::move(q));
  }
  return state;
}

}  // namespace rqat::quant
