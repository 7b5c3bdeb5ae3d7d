// See export.h.
#include "quant/compressed_tensors/export.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "io/checkpoint.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/compressed_tensors/tensors.h"
#include "quant/fused_layers.h"

namespace rqat::quant {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> linear_names(const model::CausalLM& model) {
  std::vector<std::string> names;
  for (const auto& slot : const_cast<model::CausalLM&>(model).linear_layers(true))
    names.push_back(slot.name);
  return names;
}

// out_dir must be absent or empty; returns the temporary sibling to write into (fresh).
fs::path staging_dir(const fs::path& out_dir) {
  if (fs::exists(out_dir) && (!fs::is_directory(out_dir) || !fs::is_empty(out_dir)))
    fail("{}: exists and is not an empty directory (the export writes a new one)",
         out_dir.string());
  fs::path dir = out_dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  const fs::path staging =
      dir.parent_path() / (dir.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging);
  fs::create_directories(staging);
  return staging;
}

}  // namespace

CtScheme check_compressed_tensors_exportable(const model::CausalLM& model,
                                             const QuantState& state) {
  if (state.layers.empty()) fail("compressed-tensors export: the quant state has no layers");
  std::map<std::string, at::Tensor> weights;
  for (const auto& [name, tensor] : model.state_tensors()) weights.emplace(name, tensor);
  const std::vector<std::string> linears = linear_names(model);
  const std::set<std::string> linear_set(linears.begin(), linears.end());
  const auto& [first_name, first] = *state.layers.begin();
  const CtScheme scheme =
      ct_scheme_of(first, state.spec.symmetric, state.spec.activations, first_name);
  for (const auto& [name, w] : state.layers) {
    const auto it = weights.find(name + ".weight");
    if (!linear_set.count(name) || it == weights.end())
      fail("{}: not a linear layer of the model", name);
    if (it->second.sizes() != w.codes.sizes())
      fail("{}: the quant state's codes are {}, the model's weight {}", name,
           fmt::join(w.codes.sizes(), "x"), fmt::join(it->second.sizes(), "x"));
    ct_check_layer(w, scheme, name);
  }
  if (scheme.format == CtFormat::kNvfp4PackQuantized) {
    std::map<std::string, float> globals;
    for (const auto& [name, w] : state.layers) globals[name] = w.super_scales.item<float>();
    check_fused_scales_shared(globals, "compressed-tensors export");
  }
  return scheme;
}

CompressedTensorsSummary export_compressed_tensors(const model::CausalLM& model,
                                                   const QuantState& state,
                                                   const fs::path& tokenizer_dir,
                                                   const fs::path& out_dir,
                                                   const CompressedTensorsExportOptions& options) {
  CompressedTensorsSummary summary;
  summary.scheme = check_compressed_tensors_exportable(model, state);
  const at::ScalarType dtype = options.dtype.value_or(model.options().dtype().toScalarType());

  // Every layer packed and checked before anything is written.
  std::map<std::string, CtLayerTensors> packed;
  for (const auto& [name, w] : state.layers) {
    CtLayerTensors parts = ct_layer_tensors(w, summary.scheme, dtype, name);
    const at::Tensor read = ct_dequantize(parts, summary.scheme, "export", name);
    const at::Tensor want = w.dequantize().to(at::kCPU);
    if (!at::equal(read, want))
      fail(
          "{}: its compressed-tensors tensors dequantize to a weight {:.3g} away from the quant "
          "state's (the export must be exact)",
          name, (read - want).abs().max().item<double>());
    packed.emplace(name, std::move(parts));
  }

  io::NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_tensors()) {
    const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
    if (const auto it = packed.find(module); it != packed.end()) {
      for (const auto& [suffix, t] : it->second) {
        tensors.emplace_back(module + "." + suffix, t);
        summary.packed_bytes += t.nbytes();
      }
      continue;
    }
    at::Tensor stored = tensor.detach().to(at::kCPU);
    if (at::isFloatingType(stored.scalar_type())) stored = stored.to(dtype);
    summary.full_precision_bytes += stored.nbytes();
    tensors.emplace_back(name, stored);
  }
  summary.quantized_layers = static_cast<int64_t>(packed.size());
  for (const auto& name : linear_names(model))
    if (!packed.count(name)) summary.ignored.push_back(name);
  // llm-compressor ignores lm_head by default, tied or not.
  if (!packed.count("lm_head") &&
      std::find(summary.ignored.begin(), summary.ignored.end(), "lm_head") == summary.ignored.end())
    summary.ignored.push_back("lm_head");

  model::ModelConfig config = model.config();
  config.torch_dtype = model::hf_dtype_name(dtype);
  if (!config.raw.is_object()) config.raw = io::Json::object();
  config.raw["quantization_config"] = ct_quantization_config(summary.scheme, summary.ignored);

  const fs::path staging = staging_dir(out_dir);
  try {
    io::write_checkpoint(staging, tensors, options.max_shard_bytes);
    model::save_model_config(config, staging);
    model::copy_tokenizer_files(tokenizer_dir, staging);
    if (fs::exists(out_dir)) fs::remove(out_dir);  // empty (checked above)
    fs::rename(staging, out_dir);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  return summary;
}

}  // namespace rqat::quant
