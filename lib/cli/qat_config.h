// The configuration of qat-sft and qat-kd (they differ only in their objective), declared once
// (io/options.h): every flag, its help and group, the manifest's record of the options and the
// settings part of the resume fingerprint derive from this (docs/qat.md).
#pragma once

#include <optional>
#include <string>

#include "cli/quant_config.h"
#include "cli/runtime_flags.h"
#include "io/options.h"
#include "tools/qat_command.h"

namespace rqat::cli {

struct QatConfig {
  explicit QatConfig(tools::QatObjective objective = tools::QatObjective::kSft) {
    options.objective = objective;
  }

  std::string model, out, teacher, data, eval_data;
  TrainQuantConfig quant;
  bool disable_thinking = false;
  // Distillation, data and sequence options, in-training evaluation, the trainer and the export
  // (the fields a section below declares; paths, quantization and runtime are resolved into it).
  tools::QatCommandOptions options;
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    auto& o = self.options;
    io::heading(v, "Input and output");
    v.value(self.model, "model",
            "Student: a model directory, or a ptq artifact (starts from its quant state)",
            Role::kSetting, {.required = true});
    v.value(self.out, "out", "Output artifact directory (also checkpoints and metrics)",
            Role::kRunControl, {.required = true});
    if (o.objective == tools::QatObjective::kKd) {
      v.value(self.teacher, "teacher",
              "Full-precision teacher (default: the model the ptq artifact was made from)");
      io::section(v, "Distillation", o.distill);
    }
    io::section(v, "Quantization", self.quant);
    io::heading(v, "Data");
    v.value(self.data, "data", "Training data: plain text or JSONL", Role::kSetting,
            {.required = true});
    io::section(v, "", o.data, {.rename = {{"format", "data-format"}, {"split", "data-split"}}});
    v.value(o.chat_template_file, "chat-template", "Chat template file instead of the model's");
    v.value(self.disable_thinking, "disable-thinking",
            "Qwen3: render prompts with an empty thinking block (as traces sampled that way)");
    v.value(o.data.max_documents, "max-documents", "Read at most this many documents");
    v.value(o.sequences.layout, "layout",
            "pack (concatenate and cut) or bucket (one document a row)");
    v.value(o.sequences.max_length, "max-length", "Tokens per training sequence");
    // Evaluations watch a run; they do not change what it trains.
    io::heading(v, "Evaluation during training");
    v.value(self.eval_data, "eval-data", "Held-out data scored (NLL) at each evaluation",
            Role::kRunControl);
    v.value(o.eval_max_tokens, "eval-tokens", "Target tokens of --eval-data scored",
            Role::kRunControl);
    v.value(o.eval_math_benchmark, "eval-benchmark",
            "eval-math during training on this benchmark (e.g. math500), greedy",
            Role::kRunControl);
    v.value(o.eval_math_data, "eval-benchmark-data", "Its JSONL (default $RQAT_DATA_DIR)",
            Role::kRunControl);
    v.value(o.eval_math_limit, "eval-benchmark-limit", "Problems evaluated", Role::kRunControl);
    v.value(o.eval_math_max_new_tokens, "eval-max-new-tokens", "eval-math generation limit",
            Role::kRunControl);
    v.value(o.eval_math_instruction, "eval-instruction",
            "Instruction after each eval-math problem (default: eval-math's; \"\" for none)",
            Role::kRunControl);
    io::heading(v, "Optimization and run control");
    v.value(o.activation_checkpointing, "activation-checkpointing",
            "Recompute each block in the backward pass (less memory, one more forward)",
            Role::kRunControl);
    io::section(v, "", o.trainer);
    v.value(o.backend, "backend", "Data-parallel communication: auto, gloo or nccl",
            Role::kRunControl);
    // The export is written from the finished model: a resumed run may ask for another.
    io::heading(v, "Export");
    v.value(o.export_format, "export",
            "Also write a packed GPTQ checkpoint (gptq or gptq_v2), OUT/model-TYPE.gguf of a "
            "model on a --grid gguf-TYPE (gguf), or OUT/compressed-tensors for vLLM and SGLang "
            "(compressed-tensors)",
            Role::kRunControl);
    v.value(o.gguf_embedding_type, "gguf-embedding-type",
            "With --export gguf: the embeddings' and output layer's type (default: the grid's "
            "type; f32 keeps them as rqat has them)",
            Role::kRunControl);
    io::section(v, "Runtime", self.runtime);
  }

  // The command's options (errors name the flag); also applies the runtime flags.
  tools::QatCommandOptions resolve() const;
};

// The whole main of qat-sft and qat-kd: parse, run, exit code (128 + signal when a signal
// stopped the run).
int qat_tool_main(int argc, char** argv, tools::QatObjective objective, const char* description);

}  // namespace rqat::cli
