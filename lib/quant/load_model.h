// Loading a model directory whatever its weights: full precision, or a GPTQ checkpoint whose
// quantized layers are built packed (PackedGptqLinear) and installed through
// CausalLM::replace_linear before the other weights load. Every tool loads models through here.
#pragma once

#include <filesystem>
#include <memory>

#include "model/decoder.h"
#include "model/model_dir.h"

namespace rqat::quant {

// Whether an artifact made with --act-grid computes with quantized inputs (its layers wrapped in
// ActivationQuantLinear, as it will be served), or as a plain model of its dense weights (what a
// conversion of the weights reads).
enum class InputQuantization { kAsServed, kOff };

// The artifact a tool opened once; the path version opens it.
std::shared_ptr<model::CausalLM> load_model(
    const io::Artifact& artifact, const model::LoadOptions& options = {},
    InputQuantization inputs = InputQuantization::kAsServed);
std::shared_ptr<model::CausalLM> load_model(const std::filesystem::path& dir,
                                            const model::LoadOptions& options = {});

}  // namespace rqat::quant
