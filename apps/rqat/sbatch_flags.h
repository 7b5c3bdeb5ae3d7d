// Flags of `rqat sbatch` (docs/experiments.md): SLURM batch scripts from an experiment file,
// written for review or, with --submit, submitted with sbatch. Runs from its CLI11 callback like
// `rqat nll` (see nll_flags.h): errors are printed as one line by run_tool.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "experiment/experiment_loader.h"
#include "experiment/slurm_scripts.h"
#include "experiment/stage_process.h"
#include "experiment/tool_flags.h"

namespace rqat::cli {

inline void add_sbatch_subcommand(CLI::App& app) {
  struct State {
    std::string experiment, out, run_dir, bin_dir;
    std::vector<std::string> overrides;
    bool submit = false;
    experiment::ExperimentLimits limits;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "sbatch", "Write SLURM batch scripts for an experiment (one per stage), or submit them");
  // No CLI::ExistingFile: the loader names a missing file in its usual one-line error.
  cmd->add_option("experiment", s->experiment, "Experiment YAML file")->required();
  cmd->add_option("--out", s->out, "Directory for the scripts (default: <run dir>/slurm)");
  cmd->add_option("--set", s->overrides, "Override a variable or field: KEY=VALUE (repeatable)");
  cmd->add_option("--run-dir", s->run_dir,
                  "Run directory (default: the file's `out`, else runs/<name>)");
  cmd->add_option("--bin-dir", s->bin_dir,
                  "Directory of the tool binaries (default: the directory of this rqat)");
  cmd->add_flag("--submit", s->submit,
                "Submit the scripts with sbatch in dependency order (default: only write them)");
  add_option_flags(*cmd, s->limits);

  cmd->callback([s] {
    const int code = run_tool("rqat sbatch", [&] {
      namespace fs = std::filesystem;
      experiment::PlanOptions plan_options;
      plan_options.experiment_file = s->experiment;
      plan_options.overrides = s->overrides;
      if (!s->run_dir.empty()) plan_options.run_dir = s->run_dir;
      plan_options.limits = s->limits;
      const auto plan = experiment::load_experiment_plan(plan_options);

      experiment::SlurmOptions options;
      options.work_dir = fs::current_path();
      options.out_dir = s->out.empty() ? plan.run_dir / "slurm" : fs::path(s->out);
      options.bin_dir =
          s->bin_dir.empty() ? experiment::current_executable_dir() : fs::absolute(s->bin_dir);
      // The scripts may be written on a machine without the tools; say so rather than fail, and
      // check every stage's flags against the tools when they are here.
      std::set<std::string> missing;
      for (const auto& instance : plan.stages) {
        const fs::path binary = options.bin_dir / instance.program;
        if (!fs::exists(binary) && missing.insert(instance.program).second)
          std::cerr << "warning: " << binary.string()
                    << " does not exist (here): flags not checked\n";
      }
      if (missing.empty()) experiment::check_stage_flags(plan, options.bin_dir);
      const auto scripts = experiment::write_slurm_scripts(plan, options);

      for (const auto& script : scripts) {
        std::cout << "wrote " << script.file.string() << " (" << script.instance_ids.size()
                  << (script.instance_ids.size() == 1 ? " instance)" : " instances, job array)")
                  << "\n";
      }
      const fs::path out_dir = scripts.front().file.parent_path();
      std::cout << "wrote " << (out_dir / "submit.sh").string() << " and "
                << (out_dir / "plan.txt").string() << "\n";
      if (s->submit) {
        const auto ids = experiment::submit_slurm_scripts(scripts);
        for (size_t i = 0; i < scripts.size(); ++i)
          std::cout << "submitted " << scripts[i].stage << ": job " << ids[i] << "\n";
      }
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
