// GPTQ checkpoint directories, as transformers (with optimum + gptqmodel), GPTQModel and vLLM load
// them: config.json with a "quantization_config" (quant_method "gptq"), and safetensors weights in
// which every quantized linear layer NAME is stored packed (NAME.qweight, NAME.qzeros, NAME.scales,
// NAME.g_idx; layout in gptq_packing.h) while every other tensor (embeddings, norms, biases,
// lm_head and linear layers left in full precision) is stored as usual.
//
// Export writes such a directory from a model and the quantized state of its layers; loading is
// quant::load_model() (load_model.h), which builds the quantized layers as PackedGptqLinear.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "model/decoder.h"
#include "quant/gptq_config.h"
#include "quant/gptq_packing.h"
#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

struct GptqExportOptions {
  GptqFormat format = GptqFormat::kV1;  // "gptq" (the default of vLLM and transformers) or v2
  bool allow_v1_zero_wrap = false;      // see GptqPackOptions
  bool round_scales_to_fp16 = false;    // see GptqPackOptions
  // desc_act in the config. Default: true when some layer's g_idx is not the sequential
  // c / group_size (loaders that see desc_act = false assume the sequential one).
  std::optional<bool> desc_act;
  // Recorded in quantization_config (and its "meta") when known; they do not change the tensors.
  std::string method = "gptq";  // which rqat method made the codes: "gptq", "rtn", "awq"
  std::optional<double> damp_percent;
  std::optional<bool> true_sequential;
  std::optional<bool> static_groups;
  std::optional<at::ScalarType> dtype;  // of the full-precision tensors (default: the model's)
  uint64_t max_shard_bytes = 5'000'000'000;
};

struct GptqExportSummary {
  int64_t quantized_layers = 0;
  uint64_t packed_bytes = 0;          // qweight + qzeros + scales + g_idx of all layers
  uint64_t full_precision_bytes = 0;  // every other tensor, in the stored dtype
  bool desc_act = false;
  double max_scale_rounding = 0.0;  // largest |fp16(s) - s| / s (0 unless rounding was allowed)
};

// Writes `dir`: model.safetensors (or shards) with the layers of `layers` (module name -> quantized
// state) packed and the other tensors of `model` converted to options.dtype, config.json with the
// quantization_config, and generation_config.json. The dense weights `model` holds for the
// quantized layers are not used. Copying tokenizer files is the caller's job. Every layer is
// validated and packed before anything is written; errors name the layer (see pack_gptq_layer for
// what is refused: shapes the packing cannot hold, uneven groups, zero point 0 in v1, scales that
// are not float16 values). Each layer's bits and group_size must be the spec's; with a symmetric
// spec every zero point must be 2^(bits-1), which sym=true kernels assume.
GptqExportSummary export_gptq_checkpoint(const model::CausalLM& model,
                                         const std::map<std::string, QuantizedWeight>& layers,
                                         const QuantSpec& spec, const std::filesystem::path& dir,
                                         const GptqExportOptions& options = {});

// Replaces every linear layer of `model` whose NAME.qweight is in the checkpoint of `dir` by a
// PackedGptqLinear built from the packed tensors (bias left for load_weights), computing from
// its packed codes, or from dequantized weights with `dequantize`. Returns the names replaced;
// throws when there are none or a layer is stored both packed and dense.
std::vector<std::string> attach_packed_gptq_layers(model::CausalLM& model,
                                                   const std::filesystem::path& dir,
                                                   const GptqCheckpointConfig& config,
                                                   bool dequantize = false);

// Before any work: throws when a layer the spec selects cannot be packed in the GPTQ layout
// (sizes, groups).
void check_gptq_packable(model::CausalLM& model, const QuantSpec& spec);
// check_gptq_packable, and for the v1 format with asymmetric zero points a spec without v1_zeros
// (its zero points may come out 0, which v1 cannot store).
void check_gptq_exportable(model::CausalLM& model, const QuantSpec& spec, GptqFormat format);

// Before any work: throws naming the first layer of `layers` (read from `source`) that holds a
// zero point of 0, which the GPTQ v1 format cannot store.
void check_v1_zero_points(const std::map<std::string, QuantizedWeight>& layers,
                          std::string_view source);

}  // namespace rqat::quant
