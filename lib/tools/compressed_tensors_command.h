// compressed-tensors checkpoints (quant/compressed_tensors/) from the tools: ptq's and the
// trainers' `--export compressed-tensors` (OUT/compressed-tensors), and `rqat convert` both ways
// (`--to compressed-tensors` of an artifact with a quant state; `--model DIR` of a checkpoint,
// imported as an rqat artifact to evaluate or train on).
#pragma once

#include <filesystem>
#include <ostream>

#include "io/artifact.h"
#include "model/decoder.h"
#include "quant/quant_state.h"

namespace rqat::tools {

inline constexpr const char* kCompressedTensorsExport = "compressed-tensors";

// The refusals of a compressed-tensors export that the spec alone decides (before any work):
// a GGUF grid, act-order.
void check_compressed_tensors_spec(const quant::QuantSpec& spec, bool act_order = false);

// The refusals the model's shapes decide, before a ptq or trainer run quantizes anything: a layer
// `spec` quantizes whose inputs are not whole groups (compressed-tensors has no partial groups) or
// whole activation blocks. Errors name the layer and the flag.
void check_compressed_tensors_shapes(model::CausalLM& model, const quant::QuantSpec& spec);

// Writes OUT/compressed-tensors of `state`'s layers (exact, checked per layer) and prints a line.
void export_compressed_tensors_dir(const model::CausalLM& model, const quant::QuantState& state,
                                   const std::filesystem::path& tokenizer_dir,
                                   const std::filesystem::path& out_dir, std::ostream& out);

// Whether `artifact`'s config.json says compressed-tensors (quantization_config.quant_method).
bool is_compressed_tensors_checkpoint(const io::Artifact& artifact);

// `rqat convert --model IN --to compressed-tensors --out OUT`: IN's quant state as a checkpoint.
void convert_model_to_compressed_tensors(const std::filesystem::path& in_dir,
                                         const std::filesystem::path& out_dir, std::ostream& out);
// `rqat convert --model CHECKPOINT --out OUT`: an rqat artifact (dense float32 weights, the quant
// state) with a manifest naming the checkpoint.
void import_compressed_tensors_dir(const std::filesystem::path& in_dir,
                                   const std::filesystem::path& out_dir, std::ostream& out);

}  // namespace rqat::tools
