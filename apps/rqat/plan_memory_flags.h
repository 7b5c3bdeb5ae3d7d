// Flags of `rqat plan-memory` (tools/plan_memory_command.h, docs/distributed.md "Memory plan"):
// the per-rank GPU memory of a training run from a config and the run's flags. Runs from its
// CLI11 callback like `rqat nll`: errors are one line from run_tool.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "tools/plan_memory_command.h"

namespace rqat::cli {

inline void add_plan_memory_subcommand(CLI::App& app) {
  auto options = std::make_shared<tools::PlanMemoryOptions>();
  auto* cmd = app.add_subcommand(
      "plan-memory",
      "Per-rank GPU memory of a qat-sft, qat-kd or grpo run (weights, gradients, optimizer, "
      "teacher, KV cache, activations) before launching it");
  add_option_flags(*cmd, *options);
  cmd->callback([options] {
    const int code = run_tool("rqat plan-memory", [&] {
      tools::run_plan_memory_command(*options, std::cout, std::cerr);
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
