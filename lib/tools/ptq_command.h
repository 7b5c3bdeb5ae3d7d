// The `ptq` tool as a library call: load a model directory, draw the calibration set, quantize
// (RTN / GPTQ / AWQ), and write the artifact directory:
//   config.json, model.safetensors, tokenizer files   the fake-quantized model (dequantized
//                                                     weights, float32), loadable by transformers
//   quant_state.safetensors                           codes, scales, zeros, g_idx per layer
//   manifest.json                                     tool, args, inputs, spec, method options,
//                                                     the calibration record, summary metrics
//   metrics.h5                                        per-layer relative error, timing, damping
//   gptq/ (with --export gptq|gptq_v2)                the packed GPTQ checkpoint
//   model-<type>.gguf (with --export gguf)            one GGUF file for llama.cpp: a --grid's
//                                                     layers written from their codes
// and print the per-layer table. Everything that can be checked is checked before any work.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "io/gguf_file.h"
#include "io/options.h"
#include "quant/calibration.h"
#include "quant/ptq.h"

namespace rqat::tools {

struct PtqCommandOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  quant::PtqOptions ptq;
  std::optional<quant::CalibrationOptions> calibration;  // required for gptq and awq
  std::string export_format;  // "", "gptq" or "gptq_v2" (uniform methods), "bnb" (nf4), "gguf"
  std::optional<io::GgufType> gguf_type;  // --export gguf: the matrices' type (default: --grid's)
  std::optional<io::GgufType> gguf_embedding_type;  // and the embeddings' (default: gguf_type)
  at::ScalarType dtype = at::kFloat;                // compute dtype
  c10::Device device = c10::kCPU;
  // ptq's declared options as given (cli/ptq_config.h), which the manifest records. Null when
  // made without a configuration (tests, benches).
  io::OptionsRecord record;
};

struct PtqCommandResult {
  quant::PtqResult ptq;
  double mean_relative_error = 0;  // over layers with calibration data (NaN without)
  double peak_rss_mb = 0;          // the process's peak resident memory
};

PtqCommandResult run_ptq_command(const PtqCommandOptions& options, std::ostream& out);

}  // namespace rqat::tools
