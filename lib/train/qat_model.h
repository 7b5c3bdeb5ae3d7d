// Turning a model into a quantization-aware student and back.
//
// attach_*: every selected Linear of the decoder is replaced by a FakeQuantLinear (float32 master
// weight, quantized in each forward, straight-through backward), starting either exactly at a ptq
// artifact's result (its quant_state: the master weight is the dequantized weight, scales/zeros
// as ptq chose them, so step 0 of QAT computes what ptq's model computes) or at round-to-nearest
// of the current weights.
// materialize_fake_quant: at export, each FakeQuantLinear becomes a DenseLinear holding its exact
// fake-quantized weight (so model.safetensors computes the trained quantized model in any
// full-precision loader) and its integer codes go to the returned QuantState (quant_state.
// safetensors, GPTQ export): codes and dense weights describe the same numbers bit for bit.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/training_batches.h"
#include "io/enum_names.h"
#include "model/decoder.h"
#include "quant/fake_quant_linear.h"
#include "quant/gptq_packing.h"
#include "quant/quant_spec.h"
#include "quant/quant_state.h"

namespace rqat::train {

// Replaces the layers named in `state` (all must exist with matching shapes; errors name the
// layer and `where`). Returns the replaced layer names in model order.
std::vector<std::string> attach_fake_quant(model::CausalLM& model, const quant::QuantState& state,
                                           const quant::FakeQuantOptions& options,
                                           const std::string& where);
// Replaces every layer `spec` selects, with RTN scales of its current weight rounded to float16
// (as ptq's, so that frozen scales export to GPTQ exactly).
std::vector<std::string> attach_fake_quant_rtn(model::CausalLM& model, const quant::QuantSpec& spec,
                                               const quant::FakeQuantOptions& options);

// Number of FakeQuantLinear layers in the model.
int64_t count_fake_quant_layers(model::CausalLM& model);

// See the header comment. The spec is recorded in the returned state.
quant::QuantState materialize_fake_quant(model::CausalLM& model, const quant::QuantSpec& spec);

// How the fake-quantized layers start.
enum class QuantInit {
  kAuto,        // the model's quant_state.safetensors when present, else RTN
  kQuantState,  // the model's quant_state.safetensors (an error when absent)
  kRtn,         // RTN of the loaded weights with --bits/--group-size/...
  kCount,       // not an initialization
};
constexpr EnumNames<QuantInit> enum_names(QuantInit) { return {"auto", "state", "rtn"}; }
// What a student's fake-quantized layers start from, decided before any weight loads: nothing
// (spec.bits 16), the model directory's quant state, or RTN with `spec` (spec.bits 0, the state's
// bits: a grid's own bits for RTN). Errors name --bits and --init.
struct QuantPlan {
  bool quantize = false;
  bool from_state = false;
  quant::QuantSpec spec;  // the RTN spec (from_state: filled by attach_quant_plan)
};
QuantPlan plan_quantization(const std::filesystem::path& model_dir, const quant::QuantSpec& spec,
                            QuantInit init);
// Swaps the planned layers of `model` for FakeQuantLinear; returns the spec in use and fills
// `layers` with their names. With gptq_export, first refuses what that export could not store:
// layers GPTQ cannot pack; for v1 and asymmetric zero points, a quant state holding zero points
// of 0 and learned zero points (scale modes other than frozen), while an RTN start keeps its zero
// points >= 1 (QuantSpec::v1_zeros). `bits`: the bits asked for (a quant state's must match).
quant::QuantSpec attach_quant_plan(model::CausalLM& model, const QuantPlan& plan,
                                   const std::filesystem::path& model_dir, int bits,
                                   const quant::FakeQuantOptions& options,
                                   std::optional<quant::GptqFormat> gptq_export,
                                   std::vector<std::string>& layers);

// Sequences the trainers calibrate NVFP4 activations' input global scales on.
inline constexpr int64_t kInputCalibrationSequences = 64;

// NVFP4 activations (quant/activation_quant.h): the input global scale of every student layer
// that has none (a weight-only start trained as W4A4, or an RTN start), calibrated on the first
// `count` sequences of `set` in file order (so every process and a resumed run get the same),
// `micro_batch` at a time, before training. Returns the layers calibrated (none: nothing runs).
std::vector<std::string> calibrate_student_inputs(model::CausalLM& model,
                                                  const data::SequenceSet& set, int64_t count,
                                                  int64_t micro_batch, int64_t pad_id,
                                                  c10::Device device);

}  // namespace rqat::train
