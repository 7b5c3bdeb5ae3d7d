// `rqat run EXPERIMENT.yaml`'s configuration, declared once (io/options.h; docs/experiments.md):
// expands the experiment and runs its stages, or prints the plan with --dry-run.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiment/experiment_source.h"
#include "experiment/stage_runner.h"
#include "io/options.h"

namespace rqat::cli {

struct ExperimentRunConfig {
  std::string experiment;
  std::vector<std::string> overrides;
  std::string run_dir;          // empty: the file's `out`, else runs/NAME
  experiment::RunOptions runs;  // dry run, jobs, only, force (the binaries' directory: bin_dir)
  std::string bin_dir;          // empty: the directory rqat runs from
  experiment::ExperimentLimits limits;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.experiment, "experiment", "Experiment YAML file (docs/experiments.md)",
            Role::kSetting, {.required = true, .positional = true});
    v.value(self.overrides, "set",
            "Override a value: NAME=VALUE for a variable, or a dotted path such as "
            "stages.qat.args.steps=10 (repeatable; VALUE is YAML, e.g. [2,3])");
    v.value(self.run_dir, "run-dir", "Run directory (default: the file's `out`, else runs/NAME)",
            Role::kRunControl, {.alias = "out"});
    v.value(self.runs.dry_run, "dry-run", "Print the plan and what would run; run nothing",
            Role::kRunControl);
    v.value(self.runs.jobs, "jobs", "Stages to run at once", Role::kRunControl, {.alias = "j"});
    v.value(self.runs.only, "only", "Run only these stages and what they need (repeatable)",
            Role::kRunControl);
    v.value(self.runs.force, "force", "Rerun these stages even when finished (repeatable)",
            Role::kRunControl);
    v.value(self.bin_dir, "bin-dir",
            "Directory of the tool binaries (default: the one rqat runs from)", Role::kRunControl);
    io::section(v, "", self.limits);
  }

  // Runs the plan's stages (or prints it); returns the exit status (non-zero when a stage failed).
  int run(std::ostream& out) const;
};

}  // namespace rqat::cli
