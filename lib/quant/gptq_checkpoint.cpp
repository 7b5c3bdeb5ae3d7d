// See gptq_checkpoint.h.
#include "quant/gptq_checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <set>

#include "io/checkpoint.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/gguf/grid.h"
#include "quant/packed_gptq_linear.h"

namespace rqat::quant {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDecoderBlockPrefix = "model.layers.";

bool sequential_g_idx(const QuantizedWeight& w) {
  if (!w.g_idx.defined()) return true;
  const int64_t in = w.codes.size(1);
  const int64_t group = w.group_size > 0 ? w.group_size : in;
  return at::equal(w.g_idx.to(at::kCPU, at::kLong), at::arange(in, at::kLong).div(group, "floor"));
}

uint64_t bytes_of(const at::Tensor& t) { return t.numel() * t.element_size(); }

// "model.layers.3.mlp.down_proj" -> {"3", "mlp.down_proj"}; nullopt outside the decoder blocks.
std::optional<std::pair<std::string, std::string>> split_block_name(const std::string& name) {
  if (!name.starts_with(kDecoderBlockPrefix)) return std::nullopt;
  const size_t start = std::string_view(kDecoderBlockPrefix).size();
  const size_t dot = name.find('.', start);
  if (dot == std::string::npos) return std::nullopt;
  return std::make_pair(name.substr(start, dot - start), name.substr(dot + 1));
}

std::string regex_escape(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

// How the peers learn which linear layers of the blocks stay in full precision:
// "modules_in_block_to_quantize" (optimum, transformers, vLLM) when every block quantizes the same
// layers, and GPTQModel's "dynamic" negative patterns ("-:regex": {}) for every layer left out.
void describe_quantized_set(const std::vector<std::string>& block_linears,
                            const std::set<std::string>& quantized, io::Json& config) {
  std::map<std::string, std::set<std::string>> per_block;  // block -> quantized local names
  std::set<std::string> all_local;
  io::Json dynamic = io::Json::object();
  for (const auto& name : block_linears) {
    const auto split = split_block_name(name);
    if (!split) continue;
    per_block[split->first];  // every block appears, even with nothing quantized
    all_local.insert(split->second);
    if (quantized.count(name)) {
      per_block[split->first].insert(split->second);
    } else {
      dynamic["-:^" + regex_escape(name) + "$"] = io::Json::object();
    }
  }
  if (dynamic.empty()) return;  // everything quantized: the loaders' default
  config["dynamic"] = dynamic;
  const auto& first = per_block.begin()->second;
  const bool uniform = std::all_of(per_block.begin(), per_block.end(),
                                   [&](const auto& item) { return item.second == first; });
  if (uniform && !first.empty()) {
    io::Json names = io::Json::array();
    for (const auto& local : first) names.push_back(local);
    config["modules_in_block_to_quantize"] = io::Json::array({names});
  }
}

// Names of the model's linear layers, lm_head included. linear_layers() hands out mutable slots;
// only names are read here.
std::vector<std::string> linear_layer_names(const model::CausalLM& model) {
  std::vector<std::string> linear_names;
  for (const auto& slot :
       const_cast<model::CausalLM&>(model).linear_layers(/*include_lm_head=*/true))
    linear_names.push_back(slot.name);
  return linear_names;
}

// (out, in) of the layer NAME: from its dense NAME.weight, or the packed layer's own when it was
// loaded from a GPTQ checkpoint; (-1, -1) when neither exists.
std::pair<int64_t, int64_t> layer_shape(const model::CausalLM& model,
                                        const std::map<std::string, at::Tensor>& state_by_name,
                                        const std::string& name) {
  int64_t out = -1, in = -1;
  if (auto it = state_by_name.find(name + ".weight"); it != state_by_name.end()) {
    out = it->second.size(0);
    in = it->second.size(1);
  } else if (const auto modules = model.named_modules(); const auto* module = modules.find(name)) {
    if (auto layer = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*module)) {
      out = layer->out_features();
      in = layer->in_features();
    }
  }
  return {out, in};
}

// Every check on one layer before it is packed, so that nothing is written for an export that
// would fail: a linear layer of the model, the spec's bits and group size, codes of the layer's
// shape, and the zero points that symmetric GPTQ kernels assume.
void check_exported_layer(const model::CausalLM& model,
                          const std::map<std::string, at::Tensor>& state_by_name,
                          const std::set<std::string>& linear_set, const std::string& name,
                          const QuantizedWeight& weight, const QuantSpec& spec) {
  if (linear_set.count(name) == 0)
    fail("{}: not a linear layer of this model (tied lm_head or misspelled?)", name);
  if (weight.bits != spec.bits || weight.group_size != spec.group_size) {
    fail("{}: quantized with {} bits and group size {}, but the spec says {} and {}", name,
         weight.bits, weight.group_size, spec.bits, spec.group_size);
  }
  if (!weight.codes.defined() || weight.codes.dim() != 2)
    fail("{}: codes must be an (out, in) matrix", name);
  const auto [out, in] = layer_shape(model, state_by_name, name);
  if (weight.codes.size(0) != out || weight.codes.size(1) != in) {
    fail("{}: codes have shape {}, but the layer is ({}, {})", name, c10::str(weight.codes.sizes()),
         out, in);
  }
  if (spec.symmetric && weight.zeros.defined() &&
      !weight.zeros.eq(double(int64_t{1} << (weight.bits - 1))).all().item<bool>()) {
    fail(
        "{}: the spec is symmetric but some zero points differ from {}, which sym=true GPTQ "
        "kernels assume",
        name, int64_t{1} << (weight.bits - 1));
  }
}

// Checks and packs every layer; records whether any g_idx is permuted (act-order) and the largest
// scale rounding in the summary.
std::map<std::string, GptqPackedLayer> pack_layers(
    const model::CausalLM& model, const std::map<std::string, QuantizedWeight>& layers,
    const QuantSpec& spec, const std::vector<std::string>& linear_names,
    const io::NamedTensors& state, const GptqExportOptions& options, bool& any_permuted,
    GptqExportSummary& summary) {
  const std::set<std::string> linear_set(linear_names.begin(), linear_names.end());
  std::map<std::string, at::Tensor> state_by_name(state.begin(), state.end());
  GptqPackOptions pack_options;
  pack_options.format = options.format;
  pack_options.allow_v1_zero_wrap = options.allow_v1_zero_wrap;
  pack_options.round_scales_to_fp16 = options.round_scales_to_fp16;
  std::map<std::string, GptqPackedLayer> packed;
  for (const auto& [name, weight] : layers) {
    check_exported_layer(model, state_by_name, linear_set, name, weight, spec);
    packed[name] = pack_gptq_layer(weight, name, pack_options);
    any_permuted = any_permuted || !sequential_g_idx(weight);
    const at::Tensor scales = weight.scales.to(at::kCPU, at::kFloat);
    const double rounding =
        ((packed[name].scales.t().to(at::kFloat) - scales).abs() / scales).max().item<double>();
    summary.max_scale_rounding = std::max(summary.max_scale_rounding, rounding);
  }
  return packed;
}

// The tensors to write, in the model's state order: each quantized layer's dense (or previously
// packed) weight is replaced by its packed tensors, emitted once at the layer's first tensor;
// every other tensor is converted to dtype. Fills `emitted` with the packed layers' names.
io::NamedTensors checkpoint_tensors(const model::CausalLM& model, const io::NamedTensors& state,
                                    const std::map<std::string, QuantizedWeight>& layers,
                                    const std::map<std::string, GptqPackedLayer>& packed,
                                    at::ScalarType dtype, std::set<std::string>& emitted,
                                    GptqExportSummary& summary) {
  std::set<std::string> buffers;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) buffers.insert(item.key());
  static const std::set<std::string> kPackedSuffixes = {"weight", "qweight", "qzeros", "scales",
                                                        "g_idx"};
  io::NamedTensors tensors;
  for (const auto& [name, tensor] : state) {
    const size_t dot = name.rfind('.');
    const std::string module = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string suffix = dot == std::string::npos ? name : name.substr(dot + 1);
    if (layers.count(module) && kPackedSuffixes.count(suffix)) {
      // The layer's dense (or previously packed) weight is replaced by its packed tensors.
      if (emitted.insert(module).second) {
        const GptqPackedLayer& p = packed.at(module);
        for (const auto& [part, t] : {std::pair{"qweight", p.qweight},
                                      {"qzeros", p.qzeros},
                                      {"scales", p.scales},
                                      {"g_idx", p.g_idx}}) {
          tensors.emplace_back(module + "." + part, t);
          summary.packed_bytes += bytes_of(t);
        }
      }
      continue;
    }
    // Buffers (packed tensors of layers loaded from a GPTQ checkpoint) keep their dtype.
    at::Tensor stored =
        tensor.detach().to(at::kCPU, buffers.count(name) ? tensor.scalar_type() : dtype);
    summary.full_precision_bytes += bytes_of(stored);
    tensors.emplace_back(name, stored);
  }
  return tensors;
}

// config.json's "quantization_config", in the keys the GPTQ loaders (transformers, optimum,
// GPTQModel, vLLM) read, plus rqat's own "meta".
io::Json quantization_config(const QuantSpec& spec, const GptqExportOptions& options,
                             const GptqExportSummary& summary, bool lm_head,
                             const std::vector<std::string>& linear_names,
                             const std::set<std::string>& emitted) {
  io::Json qc = io::Json::object();
  qc["quant_method"] = "gptq";
  qc["bits"] = spec.bits;
  qc["group_size"] = spec.group_size;
  qc["desc_act"] = summary.desc_act;
  qc["sym"] = spec.symmetric;
  qc["lm_head"] = lm_head;
  // GPTQModel, vLLM and older transformers read "checkpoint_format"; transformers' GPTQConfig
  // also writes the same value as "format".
  qc["checkpoint_format"] = enum_name(options.format);
  qc["format"] = enum_name(options.format);
  qc["pack_dtype"] = "int32";
  if (options.true_sequential) qc["true_sequential"] = *options.true_sequential;
  if (options.damp_percent) qc["damp_percent"] = *options.damp_percent;
  std::vector<std::string> block_linears;
  for (const auto& name : linear_names)
    if (split_block_name(name)) block_linears.push_back(name);
  describe_quantized_set(block_linears, std::set<std::string>(emitted.begin(), emitted.end()), qc);
  io::Json meta = {{"quantizer", io::Json::array({"rqat"})},
                   {"method", options.method},
                   {"mse", spec.clip_search}};
  if (options.damp_percent) meta["damp_percent"] = *options.damp_percent;
  if (options.static_groups) meta["static_groups"] = *options.static_groups;
  if (options.true_sequential) meta["true_sequential"] = *options.true_sequential;
  qc["meta"] = meta;
  return qc;
}

}  // namespace

GptqExportSummary export_gptq_checkpoint(const model::CausalLM& model,
                                         const std::map<std::string, QuantizedWeight>& layers,
                                         const QuantSpec& spec, const fs::path& dir,
                                         const GptqExportOptions& options) {
  if (layers.empty()) fail("{}: no quantized layers to export", dir.string());
  const std::vector<std::string> linear_names = linear_layer_names(model);
  io::NamedTensors state = model.state_tensors();

  GptqExportSummary summary;
  bool any_permuted = false;
  const std::map<std::string, GptqPackedLayer> packed =
      pack_layers(model, layers, spec, linear_names, state, options, any_permuted, summary);
  if (options.desc_act == false && any_permuted)
    fail("{}: desc_act = false, but some layer's g_idx is permuted (act-order)", dir.string());
  summary.desc_act = options.desc_act.value_or(any_permuted);

  const at::ScalarType dtype = options.dtype.value_or(model.options().dtype().toScalarType());
  std::set<std::string> emitted;
  io::NamedTensors tensors =
      checkpoint_tensors(model, state, layers, packed, dtype, emitted, summary);
  summary.quantized_layers = static_cast<int64_t>(emitted.size());

  io::Json qc = quantization_config(spec, options, summary, layers.count("lm_head") > 0,
                                    linear_names, emitted);
  model::ModelConfig config = model.config();
  config.torch_dtype = model::hf_dtype_name(dtype);
  if (!config.raw.is_object()) config.raw = io::Json::object();
  config.raw["quantization_config"] = qc;
  // Weights first: config.json is what marks the directory as a (complete) GPTQ checkpoint.
  io::write_checkpoint(dir, tensors, options.max_shard_bytes);
  model::save_model_config(config, dir);
  return summary;
}

std::vector<std::string> attach_packed_gptq_layers(model::CausalLM& model, const fs::path& dir,
                                                   const GptqCheckpointConfig& config,
                                                   bool dequantize) {
  io::CheckpointReader checkpoint(dir);
  const std::string where = dir.string();
  std::vector<std::string> replaced;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    const std::string& name = slot.name;
    if (!checkpoint.contains(name + ".qweight")) continue;
    if (checkpoint.contains(name + ".weight"))
      fail("{}: layer '{}' is stored both packed (qweight) and dense (weight)", where, name);
    GptqPackedLayer packed;
    packed.qweight = checkpoint.tensor(name + ".qweight");
    for (const auto& [part, target] :
         {std::pair{"qzeros", &packed.qzeros}, {"scales", &packed.scales}}) {
      if (!checkpoint.contains(name + "." + part))
        fail("{}: tensor '{}.{}' is missing (the layer has a qweight)", where, name, part);
      *target = checkpoint.tensor(name + "." + part);
    }
    if (checkpoint.contains(name + ".g_idx")) packed.g_idx = checkpoint.tensor(name + ".g_idx");
    const auto& dense = *slot.layer;
    auto layer = std::make_shared<quant::PackedGptqLinear>(
        name, packed, config.bits, config.group_size, config.format, dense->in_features(),
        dense->out_features(), dense->bias().has_value(), model.options(), dequantize);
    model.replace_linear(slot, layer);
    replaced.push_back(name);
  }
  if (replaced.empty())
    fail(
        "{}: config.json declares a GPTQ quantization, but no tensor is a packed '.qweight' of "
        "one of the model's linear layers",
        where);
  return replaced;
}

void check_gptq_exportable(model::CausalLM& model, const QuantSpec& spec, GptqFormat format) {
  if (format == GptqFormat::kV1 && !spec.symmetric && !spec.v1_zeros)
    fail(
        "--export gptq: asymmetric zero points may be 0, which the v1 format (zero - 1 stored) "
        "cannot hold; quantize with v1 zero points (ptq --v1-zeros, which --export gptq sets), "
        "use --sym, or export gptq_v2");
  check_gptq_packable(model, spec);
}

void check_gptq_packable(model::CausalLM& model, const QuantSpec& spec) {
  if (spec.gguf_grid)
    fail(
        "a model on the {} grid has no GPTQ layout (its scales are llama.cpp's): export GGUF "
        "(ptq --export gguf, rqat convert --to gguf)",
        gguf_grid_name(*spec.gguf_grid));
  const int64_t multiple = gptq_pack_multiple(spec.bits);
  for (const auto& slot : model.linear_layers(true)) {
    if (!spec.quantizes(slot.name)) continue;
    const int64_t in = (*slot.layer)->in_features(), out = (*slot.layer)->out_features();
    if (in % multiple != 0 || out % multiple != 0)
      fail(
          "--export gptq: layer {} ({}x{}) cannot be packed at {} bits (in and out features must "
          "be multiples of {}); exclude it with --exclude or do not export",
          slot.name, out, in, spec.bits, multiple);
    if (spec.group_size > 0 && in % spec.group_size != 0)
      fail(
          "--export gptq: layer {} has {} inputs, which --group-size {} does not divide (rqat "
          "quantizes a smaller last group; the GPTQ layout cannot store it)",
          slot.name, in, spec.group_size);
  }
}

void check_v1_zero_points(const std::map<std::string, QuantizedWeight>& layers,
                          std::string_view source) {
  for (const auto& [name, weight] : layers) {
    const int64_t at_zero = weight.zeros.eq(0).sum().item<int64_t>();
    if (at_zero > 0)
      fail(
          "--export gptq: {} layer {} has {} zero points of 0, which the v1 format (zero - 1 "
          "stored) cannot hold; make it with ptq --v1-zeros (or --export gptq), or export "
          "gptq_v2",
          source, name, at_zero);
  }
}

}  // namespace rqat::quant
