// The flags of grpo, parsed into a GrpoCommandOptions (quantization, optimization and run control
// are the training tools' shared groups, cli/train_flags.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/runtime_flags.h"
#include "cli/train_flags.h"
#include "tools/grpo_command.h"

namespace rqat::cli {

struct GrpoFlags {
  tools::GrpoCommandOptions options;
  QuantFlags quant;
  RunFlags run;
  std::string model_dir, out_dir, data;
  std::string problem_field = "problem", answer_field = "answer", id_field;
  bool gsm8k_answers = false;
  bool no_chat_template = false, disable_thinking = false;
  RuntimeFlags runtime;

  tools::GrpoCommandOptions resolve();
};

void add_grpo_flags(CLI::App& app, GrpoFlags& flags);

}  // namespace rqat::cli
