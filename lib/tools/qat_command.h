// qat-sft and qat-kd as library calls (apps/ only parse flags): train a student on a data set and
// write an artifact directory like ptq's.
//
// Student: --model is a full-precision model directory or a ptq artifact. Quantization-aware
// training swaps the selected linear layers for FakeQuantLinear (quant/fake_quant_linear.h),
// initialized from the artifact's quant_state.safetensors (exactly ptq's result: GPTQ, AWQ or RTN)
// or by RTN of the loaded weights (--init rtn, or when the model has no quant state). --bits 16
// trains in full precision (plain SFT or distillation without quantization).
// Objective: qat-sft minimizes the cross-entropy of the data's target tokens; qat-kd a divergence
// from a frozen teacher run on the same batch (train/distill_loss.h), by default the full-
// precision model the ptq artifact was made from (its manifest's inputs.model).
// Output (OUT): config.json + model.safetensors (the trained fake-quantized weights, dequantized,
// float32) + tokenizer files + quant_state.safetensors (integer codes, scales, zeros) +
// manifest.json + metrics.jsonl/metrics.h5 + checkpoints/ + gptq/ with --export.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "data/text_dataset.h"
#include "data/training_batches.h"
#include "io/enum_names.h"
#include "io/gguf_file.h"
#include "io/options.h"
#include "model/decoder.h"
#include "quant/fake_quant_linear.h"
#include "quant/quant_spec.h"
#include "tokenizer/tokenizer.h"
#include "train/distill_loss.h"
#include "train/distributed.h"
#include "train/qat_model.h"
#include "train/trainer.h"

namespace rqat::tools {

enum class QatObjective { kSft, kKd, kCount };
// The tool names, as manifests and metrics record them.
constexpr EnumNames<QatObjective> enum_names(QatObjective) { return {"qat-sft", "qat-kd"}; }

struct QatCommandOptions {
  QatObjective objective = QatObjective::kSft;
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  std::optional<std::filesystem::path> teacher_dir;  // kd: default from the ptq manifest
  // Quantization: spec.bits 0 (the default) = the quant state's, 16 = no quantization; the rest
  // of spec is the RTN start's.
  quant::QuantSpec spec{.bits = quant::QuantSpec::kBitsOfInput};
  train::QuantInit init = train::QuantInit::kAuto;
  quant::FakeQuantOptions fake_quant;
  // Data.
  data::TextDataOptions data;
  std::string chat_template_file;
  data::SequenceOptions sequences;
  std::optional<data::TextDataOptions> eval_data;  // held-out NLL during training
  int64_t eval_max_tokens = 20000;  // target tokens of eval_data scored per evaluation
  // eval-math on the first problems of a benchmark during training (greedy), when a name is set:
  // a built-in benchmark (math500, gsm8k, ...) read from eval_math_data or $RQAT_DATA_DIR.
  std::string eval_math_benchmark;
  std::string eval_math_data;
  int64_t eval_math_limit = 32;
  int64_t eval_math_max_new_tokens = 1024;
  // The instruction after each problem (nullopt: eval-math's default; "" for none), so the curve is
  // measured the way the final eval-math stage measures.
  std::optional<std::string> eval_math_instruction;
  train::DistillOptions distill;
  train::TrainerOptions trainer;
  bool activation_checkpointing = false;
  std::string export_format;                        // "", "gptq", "gptq_v2", "gguf"
  std::optional<io::GgufType> gguf_embedding_type;  // --export gguf: embeddings' and output layer's
  train::CommBackend backend = train::CommBackend::kAuto;
  at::ScalarType dtype = at::kFloat;  // bf16 means: f32 master weights, bf16 autocast (CUDA)
  c10::Device device = c10::kCPU;
  // The tool's declared options as given (cli/*_config.h): the manifest records them all, the
  // resume fingerprint their settings. Null when made without a configuration (tests, benches).
  io::OptionsRecord record;
};

struct QatCommandResult {
  train::TrainerResult train;
  int exit_code = 0;  // 0, or 128 + signal when stopped by a signal (checkpoint written)
};

QatCommandResult run_qat_command(const QatCommandOptions& options, std::ostream& out);

}  // namespace rqat::tools
