// Flags of `rqat run EXPERIMENT.yaml` (docs/experiments.md): expands the experiment and runs its
// stages, or prints the plan with --dry-run.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "experiment/experiment_loader.h"
#include "experiment/stage_process.h"
#include "experiment/stage_runner.h"

namespace rqat::cli {

inline void add_run_subcommand(CLI::App& app) {
  struct State {
    std::string experiment, run_dir, bin_dir;
    std::vector<std::string> overrides;
    experiment::RunOptions options;
    experiment::ExperimentLimits limits;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "run", "Run a YAML experiment: its stages as processes of the tools, skipping finished ones");
  cmd->add_option("experiment", s->experiment, "Experiment YAML file (docs/experiments.md)")
      ->required();
  cmd->add_option("--set", s->overrides,
                  "Override a value: NAME=VALUE for a variable, or a dotted path such as "
                  "stages.qat.args.steps=10 (repeatable; VALUE is YAML, e.g. [2,3])");
  cmd->add_option("--run-dir,--out", s->run_dir,
                  "Run directory (default: the file's `out`, else runs/NAME)");
  cmd->add_flag("--dry-run", s->options.dry_run, "Print the plan and what would run; run nothing");
  cmd->add_option("-j,--jobs", s->options.jobs, "Stages to run at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--only", s->options.only,
                  "Run only these stages and what they need (repeatable)");
  cmd->add_option("--force", s->options.force,
                  "Rerun these stages even when finished (repeatable)");
  cmd->add_option("--bin-dir", s->bin_dir,
                  "Directory of the tool binaries (default: the one rqat runs from)");
  add_option_flags(*cmd, s->limits);
  cmd->callback([s] {
    int status = 0;
    const int code = run_tool("rqat run", [&] {
      experiment::PlanOptions plan_options{s->experiment, s->overrides, std::nullopt};
      if (!s->run_dir.empty()) plan_options.run_dir = s->run_dir;
      plan_options.limits = s->limits;
      const auto plan = experiment::load_experiment_plan(plan_options);
      s->options.bin_dir = s->bin_dir.empty() ? experiment::current_executable_dir()
                                              : std::filesystem::path(s->bin_dir);
      status = experiment::run_plan(plan, s->options, std::cout);
    });
    if (code != 0) throw CLI::RuntimeError(code);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace rqat::cli
