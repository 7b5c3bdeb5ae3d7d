// grpo's configuration, declared once (io/options.h): every flag, its help and group, the
// manifest's record of the options and the settings part of the resume fingerprint derive from
// this (docs/grpo.md). The policy, LoRA, rollout and objective options are
// GrpoCommandOptions::for_each, a section here.
#pragma once

#include <string>

#include "cli/quant_config.h"
#include "cli/runtime_flags.h"
#include "io/options.h"
#include "tools/grpo_command.h"

namespace rqat::cli {

struct GrpoConfig {
  std::string model, out, data;
  std::string problem_field = "problem", answer_field = "answer", id_field;
  bool gsm8k_answers = false;
  bool no_chat_template = false, disable_thinking = false;
  TrainQuantConfig quant;
  tools::GrpoCommandOptions options;
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    auto& o = self.options;
    io::heading(v, "Input and output");
    v.value(self.model, "model", "Policy: a model directory or a ptq/qat artifact", Role::kSetting,
            {.required = true});
    v.value(self.out, "out", "Output artifact directory (also checkpoints and metrics)",
            Role::kRunControl, {.required = true});
    io::heading(v, "Prompts");
    v.value(self.data, "data", "Prompts with gold answers, JSONL", Role::kSetting,
            {.required = true});
    v.value(self.problem_field, "problem-field", "JSONL problem field");
    v.value(self.answer_field, "answer-field", "JSONL gold answer field");
    v.value(self.id_field, "id-field", "JSONL id field (default: the line index)");
    v.value(self.gsm8k_answers, "gsm8k-answers", "Gold is what follows #### (GSM8K solutions)");
    v.value(o.prompt.instruction, "instruction", "Appended to each problem");
    v.value(o.prompt.system_prompt, "system-prompt", "System message");
    v.value(o.prompt.chat_template_file, "chat-template", "Chat template file");
    v.value(self.no_chat_template, "no-chat-template", "Plain text prompts");
    v.value(self.disable_thinking, "disable-thinking", "Qwen3: empty thinking block");
    io::section(v, "Quantization", self.quant);
    io::section(v, "Policy, rollouts and objective", o);
    io::section(v, "", o.rollout, {.rename = {{"max-batch", "rollout-batch"}}});
    // grpo's batch is --prompts-per-step and its micro-batches its own --micro-batch-size.
    io::section(v, "Optimization and run control", o.trainer,
                {.skip = {"batch-size", "micro-batch-size"}});
    v.value(o.backend, "backend", "Data-parallel communication: auto, gloo or nccl",
            Role::kRunControl);
    io::section(v, "Runtime", self.runtime);
  }

  // The command's options (errors name the flag); also applies the runtime flags.
  tools::GrpoCommandOptions resolve() const;
};

}  // namespace rqat::cli
