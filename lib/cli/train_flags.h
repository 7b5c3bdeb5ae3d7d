// The flags of the training tools. qat-sft and qat-kd share one set (they differ only in their
// objective); grpo reuses the quantization, optimization and run-control groups.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "tools/qat_command.h"

namespace rqat::cli {

// --bits, --init, --group-size, --sym, --include, --exclude, --scale-mode, --lsq-grad-scale.
struct QuantFlags {
  std::optional<int> bits;
  train::QuantInit init = train::QuantInit::kAuto;
  std::vector<std::string> include, exclude;
  std::string grid;  // "" (uniform) or gguf-<type>
  quant::QuantSpec spec;
  quant::FakeQuantOptions fake_quant;
  // Fills the resolved values; errors name the flag.
  void resolve(std::optional<int>& bits_out, quant::QuantSpec& spec_out, train::QuantInit& init_out,
               quant::FakeQuantOptions& fake_quant_out) const;
};
void add_quant_flags(CLI::App& app, QuantFlags& flags);

// The flags of TrainerOptions::for_each (--steps, --batch-size, --lr, --schedule, --adam-*, ...,
// --resume; `selection` leaves some out) and --backend.
struct RunFlags {
  train::TrainerOptions trainer;
  train::CommBackend backend = train::CommBackend::kAuto;
  void resolve(train::TrainerOptions& trainer_out, train::CommBackend& backend_out) const;
};
void add_run_flags(CLI::App& app, RunFlags& flags, FlagSelection selection = {});

struct QatFlags {
  tools::QatCommandOptions options;
  QuantFlags quant;
  RunFlags run;
  std::string model_dir, out_dir, teacher_dir;
  std::string data;
  std::string eval_data;
  bool disable_thinking = false;
  std::string layout = "pack";
  std::string gguf_embedding_type;
  RuntimeFlags runtime;

  // Resolves the parsed strings; errors name the flag.
  tools::QatCommandOptions resolve(tools::QatObjective objective);
};

void add_qat_flags(CLI::App& app, QatFlags& flags, tools::QatObjective objective);

// The whole main of qat-sft and qat-kd (they differ only in their objective): parse, run, exit
// code (128 + signal when a signal stopped the run).
int qat_tool_main(int argc, char** argv, tools::QatObjective objective, const char* description);

}  // namespace rqat::cli
