// See export.h. Metadata keys and types follow what llama.cpp's loader reads (it is strict
// about them: sizes are uint32, epsilon and rope base float32).
#include "quant/gguf/export.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <string_view>
#include <utility>
#include <vector>

#include "io/error.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/grid_blocks.h"
#include "quant/gguf/names.h"
#include "quant/gguf/tokenizer.h"

namespace rqat::quant {

namespace {

using io::GgufType;

// general.file_type of a file whose matrices are all of one type (llama.h's llama_ftype; the
// K-quants as their "_S" variants, the closest to one type throughout).
uint32_t file_type(GgufType type) {
  switch (type) {
    case GgufType::kF32:
      return 0;
    case GgufType::kF16:
      return 1;
    case GgufType::kBF16:
      return 32;
    case GgufType::kQ8_0:
      return 7;
    case GgufType::kQ4_0:
      return 2;
    case GgufType::kQ4_1:
      return 3;
    case GgufType::kQ2_K:
      return 10;
    case GgufType::kQ3_K:
      return 11;
    case GgufType::kQ4_K:
      return 14;
    case GgufType::kQ5_K:
      return 16;
    case GgufType::kQ6_K:
      return 18;
    case GgufType::kCount:
      break;
  }
  return 0;
}

// Llama 3.1's rope scaling as llama.cpp takes it: per frequency, the divisor of its angle.
at::Tensor llama3_rope_factors(const model::ModelConfig& c) {
  const auto& s = *c.rope_llama3;
  const int64_t half = c.head_dim / 2;
  at::Tensor out = at::empty({half}, at::kFloat);
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = static_cast<float>(
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim)));
    const double wavelen = 2 * std::numbers::pi / inv_freq;
    double factor = 1;
    if (wavelen > low_wavelen) {
      factor = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      factor = 1 / ((1 - smooth) / s.factor + smooth);
    }
    out[i] = static_cast<float>(factor);
  }
  return out;
}

void add_architecture(io::GgufWriter& w, const model::ModelConfig& c, const std::string& arch) {
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.add(arch + ".context_length", u32(c.max_position_embeddings));
  w.add(arch + ".embedding_length", u32(c.hidden_size));
  w.add(arch + ".block_count", u32(c.num_hidden_layers));
  w.add(arch + ".feed_forward_length", u32(c.intermediate_size));
  w.add(arch + ".attention.head_count", u32(c.num_attention_heads));
  w.add(arch + ".attention.head_count_kv", u32(c.num_key_value_heads));
  w.add(arch + ".attention.key_length", u32(c.head_dim));
  w.add(arch + ".attention.value_length", u32(c.head_dim));
  w.add(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.add(arch + ".rope.freq_base", static_cast<float>(c.rope_theta));
  if (c.family == model::Family::kLlama) {
    w.add(arch + ".rope.dimension_count", u32(c.head_dim));
    w.add(arch + ".vocab_size", u32(c.vocab_size));
  }
}

struct PlannedTensor {
  std::string hf_name, gguf_name;
  at::Tensor value;
  GgufType type;
  const QuantizedWeight* grid = nullptr;  // on the grid of `type`: written from its codes
};

// The layer of `hf_name` ("model.layers.0.mlp.up_proj.weight") among grid layers of `type`.
const QuantizedWeight* grid_layer(const GgufExportOptions& options, const std::string& hf_name) {
  const std::optional<std::string> layer = weight_layer_name(hf_name);
  if (options.grid_layers == nullptr || !layer) return nullptr;
  const auto it = options.grid_layers->find(*layer);
  if (it == options.grid_layers->end() || it->second.gguf_grid != options.type) return nullptr;
  return &it->second;
}

// The bytes of a grid layer, checked against the weight they must reproduce (already reordered).
std::string exact_grid_bytes(const PlannedTensor& t, const QuantizedWeight& w,
                             const at::Tensor& value) {
  std::string bytes = gguf_grid_to_blocks(t.type, w, t.hf_name);
  const at::Tensor read = dequantize_gguf_tensor(t.type, bytes, value.sizes());
  if (!at::equal(read, value)) {
    const double worst = (read - value).abs().max().item<double>();
    fail(
        "{}: the {} blocks of its codes differ from the model's weight by up to {:.3g} (the "
        "model's weights are not the quant state's: was it changed after ptq or QAT?)",
        t.hf_name, enum_name(t.type), worst);
  }
  return bytes;
}

// Every tensor's name and type first, so that a type the shapes cannot hold fails before work.
std::vector<PlannedTensor> plan_tensors(const model::CausalLM& model,
                                        const GgufExportOptions& options) {
  const model::ModelConfig& c = model.config();
  if (c.family == model::Family::kQwen2 && c.q_dim() != c.hidden_size)
    fail("--export gguf: llama.cpp's qwen2 needs heads x head_dim = hidden_size ({} x {} != {})",
         c.num_attention_heads, c.head_dim, c.hidden_size);
  std::vector<PlannedTensor> plan;
  for (const auto& [name, value] : model.state_tensors()) {
    const std::string gguf = gguf_tensor_name(name);
    if (gguf.empty()) fail("--export gguf: no llama.cpp tensor for {}", name);
    const bool matrix = value.dim() == 2;
    const bool in_layers = name.starts_with("model.layers.");
    const GgufType type = !matrix     ? GgufType::kF32
                          : in_layers ? options.type
                                      : options.embedding_type.value_or(options.type);
    if (matrix && !gguf_row_fits(type, value.size(1)))
      fail(
          "--gguf-{}type {}: {} ({}) has rows of {} values, not a whole number of {}-value {} "
          "blocks",
          in_layers || !options.embedding_type ? "" : "embedding-", enum_name(type), name, gguf,
          value.size(1), io::gguf_type_info(type).block_elements, enum_name(type));
    plan.push_back({name, gguf, value, type, matrix ? grid_layer(options, name) : nullptr});
  }
  return plan;
}

// The importance-matrix weights of a tensor about to be quantized to a block type, if the matrix
// names it (undefined otherwise, and for the float types and Q8_0, which llama.cpp quantizes
// without one).
at::Tensor importance_of(const GgufExportOptions& options, const PlannedTensor& t,
                         const at::Tensor& value) {
  if (options.importance == nullptr || !has_gguf_grid(t.type) || t.type == GgufType::kQ8_0 ||
      value.dim() != 2)
    return {};
  const auto found = options.importance->find(t.gguf_name);
  if (found == options.importance->end()) return {};
  if (found->second.in_sum2.numel() != value.size(1))
    fail("imatrix: {} has {} columns, its importance {} values", t.gguf_name, value.size(1),
         found->second.in_sum2.numel());
  return found->second.weights();
}

}  // namespace

void check_gguf_exportable(const model::CausalLM& model, const GgufExportOptions& options) {
  plan_tensors(model, options);
}

GgufExportSummary export_gguf(const model::CausalLM& model, const io::Artifact& tokenizer,
                              const std::filesystem::path& out_file,
                              const GgufExportOptions& options) {
  const model::ModelConfig& c = model.config();
  const std::string arch(enum_name(c.family));
  const std::vector<PlannedTensor> plan = plan_tensors(model, options);

  io::GgufWriter writer;
  writer.add("general.architecture", arch);
  writer.add("general.type", std::string("model"));
  if (!options.name.empty()) writer.add("general.name", options.name);
  writer.add("general.file_type", file_type(options.type));
  writer.add("general.quantization_version", uint32_t{2});
  add_architecture(writer, c, arch);
  // The exact config.json, for rqat's import (llama.cpp ignores keys it does not know).
  writer.add("rqat.source_config", c.to_json().dump());
  add_gguf_tokenizer(writer, tokenizer, c);

  if (c.family == model::Family::kLlama && c.rope_llama3) {
    const at::Tensor factors = llama3_rope_factors(c);
    writer.add_tensor({"rope_freqs.weight",
                       {factors.size(0)},
                       GgufType::kF32,
                       quantize_gguf_tensor(GgufType::kF32, factors)});
  }
  at::NoGradGuard no_grad;
  GgufExportSummary summary;
  for (const auto& t : plan) {
    at::Tensor value = t.value.detach().to(at::kCPU, at::kFloat).contiguous();
    std::optional<QuantizedWeight> grid;
    if (t.grid != nullptr) grid = *t.grid;
    if (const auto heads = rope_reordered_heads(t.hf_name, c.family == model::Family::kLlama,
                                                c.num_attention_heads, c.num_key_value_heads)) {
      value = interleave_rope_rows(value, *heads);
      if (grid) grid = select_rows(*grid, rope_row_order(grid->out_features(), *heads, true));
    }
    const at::Tensor importance = grid ? at::Tensor() : importance_of(options, t, value);
    std::string bytes =
        grid ? exact_grid_bytes(t, *grid, value) : quantize_gguf_tensor(t.type, value, importance);
    if (value.dim() == 2)
      ++(grid                   ? summary.grid_layers
         : importance.defined() ? summary.weighted[t.type]
                                : summary.requantized[t.type]);
    writer.add_tensor({t.gguf_name, value.sizes().vec(), t.type, std::move(bytes)});
  }
  summary.tensors = static_cast<int64_t>(writer.tensor_count());
  writer.write(out_file);
  return summary;
}

}  // namespace rqat::quant
