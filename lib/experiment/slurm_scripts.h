// `rqat sbatch` (docs/experiments.md): an expanded experiment plan as SLURM batch scripts, one per
// stage of the file (a job array when the stage has several sweep instances), plus submit.sh that
// chains them with --dependency=afterok, and the same submission done directly with sbatch.
//
// Every value that comes from the plan is single-quoted in the shell code, so no YAML value can
// run a command; #SBATCH header values (which sbatch, not the shell, reads) are restricted to
// characters that cannot end or split the directive.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

struct SlurmOptions {
  std::filesystem::path out_dir;   // where the scripts go (created)
  std::filesystem::path bin_dir;   // absolute directory of the tool binaries
  std::filesystem::path work_dir;  // absolute; every script cd's here first (relative plan paths)
};

// One written batch script: a stage of the experiment file and its instances.
struct SlurmScript {
  std::string stage;                      // the stage's name in the file
  std::filesystem::path file;             // absolute <out>/<stage>.sbatch
  std::vector<std::string> instance_ids;  // array task i runs instance_ids[i]
  std::vector<std::string> after;  // stages whose jobs must succeed first (submitted earlier)
  std::filesystem::path log_dir;   // absolute; must exist before the job starts
};

// The word `value` as one shell word: single quotes, with ' written as '\''.
std::string shell_quote(std::string_view value);

// Writes <out>/<stage>.sbatch for every stage, <out>/submit.sh and <out>/plan.txt. Returns the
// scripts in submission order (a stage after every stage it needs). Throws rqat::Error naming the
// stage and field for values that cannot go into a script, instances of one stage with different
// resources, and dependencies that cannot be expressed per stage (a cycle between stages).
std::vector<SlurmScript> write_slurm_scripts(const ExperimentPlan& plan,
                                             const SlurmOptions& options);

// Submits the scripts in order with `sbatch --parsable [--dependency=afterok:ID:...] FILE` (sbatch
// found on PATH, run without a shell), creating their log directories first. Returns the job ids.
std::vector<std::string> submit_slurm_scripts(const std::vector<SlurmScript>& scripts);

}  // namespace rqat::experiment
