// `rqat sbatch EXPERIMENT.yaml`'s configuration, declared once (io/options.h;
// docs/experiments.md): SLURM batch scripts from an experiment file, written for review or, with
// --submit, submitted with sbatch.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiment/experiment_source.h"
#include "io/options.h"

namespace rqat::cli {

struct SbatchConfig {
  // Not checked for existence here: the loader names a missing file in its usual one-line error.
  std::string experiment;
  std::string out;  // empty: <run dir>/slurm
  std::vector<std::string> overrides;
  std::string run_dir;  // empty: the file's `out`, else runs/<name>
  std::string bin_dir;  // empty: the directory of this rqat
  bool submit = false;
  experiment::ExperimentLimits limits;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.experiment, "experiment", "Experiment YAML file", Role::kSetting,
            {.required = true, .positional = true});
    v.value(self.out, "out", "Directory for the scripts (default: <run dir>/slurm)",
            Role::kRunControl);
    v.value(self.overrides, "set", "Override a variable or field: KEY=VALUE (repeatable)");
    v.value(self.run_dir, "run-dir", "Run directory (default: the file's `out`, else runs/<name>)",
            Role::kRunControl);
    v.value(self.bin_dir, "bin-dir",
            "Directory of the tool binaries (default: the directory of this rqat)",
            Role::kRunControl);
    v.value(self.submit, "submit",
            "Submit the scripts with sbatch in dependency order (default: only write them)",
            Role::kRunControl);
    io::section(v, "", self.limits);
  }

  // Writes (and with --submit submits) the scripts, saying what it did on `out`; warnings, such as
  // tool binaries that are not here, go to `err`.
  void run(std::ostream& out, std::ostream& err) const;
};

}  // namespace rqat::cli
