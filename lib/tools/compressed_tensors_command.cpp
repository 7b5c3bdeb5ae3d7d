// See compressed_tensors_command.h.
#include "tools/compressed_tensors_command.h"

#include <fmt/format.h>

#include "io/error.h"
#include "io/manifest.h"
#include "quant/compressed_tensors/export.h"
#include "quant/compressed_tensors/import.h"
#include "quant/fp_grid.h"
#include "quant/load_model.h"

namespace rqat::tools {

void check_compressed_tensors_spec(const quant::QuantSpec& spec, bool act_order) {
  if (spec.gguf_grid)
    fail("--export {}: the layers are on llama.cpp's {} grid (use --export gguf)",
         kCompressedTensorsExport, *spec.grid_name());
  if (act_order)
    fail(
        "--export {}: compressed-tensors 0.20 has no act-order (g_idx); drop --act-order or add "
        "--static-groups",
        kCompressedTensorsExport);
}

void check_compressed_tensors_shapes(model::CausalLM& model, const quant::QuantSpec& spec) {
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    const int64_t in = (*slot.layer)->in_features();
    const int64_t group = spec.effective_group_size(in);
    if (in % group != 0)
      fail(
          "--export {}: {}'s {} inputs are not whole groups of {} (compressed-tensors has no "
          "partial groups; exclude the layer or pick another group size)",
          kCompressedTensorsExport, slot.name, in, group);
    const int64_t block = spec.activations ? quant::fp_block_size(*spec.activations) : 0;
    if (block > 0 && in % block != 0)
      fail("--export {}: {}'s {} inputs are not whole {} activation blocks of {}",
           kCompressedTensorsExport, slot.name, in, enum_name(*spec.activations), block);
  }
}

void export_compressed_tensors_dir(const model::CausalLM& model, const quant::QuantState& state,
                                   const std::filesystem::path& tokenizer_dir,
                                   const std::filesystem::path& out_dir, std::ostream& out) {
  check_compressed_tensors_spec(state.spec);
  // float32 full-precision tensors: the scales rqat's layers hold are exact there (an int
  // layer's fp16-rounded scales too).
  quant::CompressedTensorsExportOptions options;
  options.dtype = at::kFloat;
  const auto summary =
      quant::export_compressed_tensors(model, state, tokenizer_dir, out_dir, options);
  out << fmt::format(
      "exported {} layers as compressed-tensors ({:.2f} packed MB, {:.2f} full-precision MB; "
      "ignored: {}) "
      "to {}\n",
      summary.quantized_layers, summary.packed_bytes / 1e6, summary.full_precision_bytes / 1e6,
      fmt::join(summary.ignored, ", "), out_dir.string());
}

bool is_compressed_tensors_checkpoint(const io::Artifact& artifact) {
  const io::Json& config = artifact.config;
  if (!config.is_object() || !config.contains("quantization_config")) return false;
  const io::Json& q = config["quantization_config"];
  return q.is_object() && q.value("quant_method", "") == "compressed-tensors";
}

void convert_model_to_compressed_tensors(const std::filesystem::path& in_dir,
                                         const std::filesystem::path& out_dir, std::ostream& out) {
  const io::Artifact artifact = io::Artifact::open(in_dir);
  if (!artifact.has(quant::kQuantStateFile))
    fail("--to {}: {} has no {} (quantize it with ptq or a trainer first)",
         kCompressedTensorsExport, in_dir.string(), quant::kQuantStateFile);
  const quant::QuantState state = quant::load_quant_state(in_dir);
  model::LoadOptions load;
  load.dequantize = true;
  // The dense weights as stored: the export describes the activations in its config instead.
  const auto model = quant::load_model(artifact, load, quant::InputQuantization::kOff);
  export_compressed_tensors_dir(*model, state, in_dir, out_dir, out);
}

void import_compressed_tensors_dir(const std::filesystem::path& in_dir,
                                   const std::filesystem::path& out_dir, std::ostream& out) {
  const auto imported = quant::import_compressed_tensors(in_dir, out_dir);
  io::Manifest manifest;
  manifest.tool = "rqat convert";
  manifest.inputs["model"] = in_dir.string();
  manifest.config["from"] = kCompressedTensorsExport;
  manifest.config["quant"] = imported.state.spec.to_json();
  manifest.metrics["quantized_layers"] = imported.state.layers.size();
  if (!imported.unread_activations.empty())
    manifest.config["unread_activations"] = imported.unread_activations;
  io::write_manifest(out_dir, manifest);
  out << fmt::format("imported {} quantized layers ({}) from {}\n", imported.state.layers.size(),
                     imported.state.spec.describe(), in_dir.string());
  if (!imported.unread_activations.empty())
    out << fmt::format(
        "note: its input activations ({}) are not a scheme rqat computes; the imported model "
        "computes with full-precision activations\n",
        imported.unread_activations);
}

}  // namespace rqat::tools
