// The expanded form of an experiment file: every stage instance of the run matrix with its resolved
// command, directory, inputs and resources, in dependency order. `rqat run` executes it, `rqat
// sbatch` turns it into SLURM scripts, and plan.json (what `rqat report` reads) is its JSON form.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/json_file.h"

namespace rqat::experiment {

// Where a value came from: a YAML position, or a --set override (file "--set KEY", line 0).
struct SourceLocation {
  std::string file;
  int line = 0;                   // 1-based; 0 when not from a file
  int column = 0;                 // 1-based
  std::string to_string() const;  // "FILE:LINE:COLUMN" or "FILE"
};

// SLURM resources of one stage (docs/experiments.md); empty strings and 0 mean "not set".
struct SlurmResources {
  int nodes = 1;
  int gpus = 0;  // per node
  int cpus = 0;  // per task
  // Memory of one GPU in GB, for `rqat run --dry-run`'s memory plan of training stages (not a
  // SLURM directive: SLURM requests GPUs by type, e.g. with `constraint`).
  int gpu_memory_gb = 0;
  // Preemption: SLURM sends SIGUSR1 this many seconds before the time limit or a preemption
  // (#SBATCH --signal=B:USR1@N; 0: none), on which a trainer checkpoints and exits 138; with
  // requeue 1 (#SBATCH --requeue) the script then requeues the job, which resumes from it.
  int signal_seconds = 0;
  int requeue = 0;
  std::string time, mem, partition, account, constraint, qos;
};

// One field of SlurmResources under the name it has everywhere: experiment files, plan.json and
// #SBATCH directives. Exactly one of `number` and `text` is set.
struct ResourceField {
  const char* name;
  int SlurmResources::*number = nullptr;
  std::string SlurmResources::*text = nullptr;
  std::string value_text(const SlurmResources& r) const;  // a number in decimal
};

// Every field of SlurmResources, in the order files and scripts list them.
const std::vector<ResourceField>& slurm_resource_fields();

struct StageInstance {
  std::string id;       // unique within the plan, e.g. "qat.bits-3.init-gptq"; the directory name
  std::string stage;    // the stage's name in the file, e.g. "qat"
  std::string tool;     // as written after interpolation: "qat-kd", "rqat traces"
  std::string program;  // the binary: "qat-kd", "rqat"
  std::vector<std::string> argv;    // arguments after the binary (subcommand first for rqat tools)
  std::filesystem::path out_dir;    // run_dir / id
  std::vector<std::string> inputs;  // ids of the instances this one needs
  // The sweep variables this instance depends on (directly or through inputs), in sweep order.
  std::vector<std::pair<std::string, std::string>> point;
  std::string label;  // the stage's `label`, interpolated; defaults to id
  SlurmResources resources;
  SourceLocation location;  // the stage's key in the file
  // "FILE:LINE:COL: PATH" for paths named in the arguments that no stage produces and that do not
  // exist (yet).
  std::vector<std::string> missing_paths;
};

// A finding of the papers that a run decides (docs/experiments.md, "Findings"): `rqat report`
// compares the eval-math instances of `higher` with those of `lower`, paired problem by problem,
// and says whether the run shows the paper's claim that `higher` scores more.
struct FindingArm {
  std::string stage;  // an eval-math stage of the experiment
  std::vector<std::pair<std::string, std::string>> where;  // sweep variable -> value (all must hold)
};
struct Finding {
  std::string name;
  std::string claim;                // the paper's words, for the report
  std::string metric = "accuracy";  // per problem: the share of correct samples, or "reward"
  FindingArm higher, lower;
};

struct ExperimentPlan {
  std::string name;
  std::string description;
  std::filesystem::path experiment_file;
  std::filesystem::path run_dir;
  std::vector<std::string> sweep_variables;  // grid then zip names, in the order written
  // The sweep variable of training seeds (`seeds:`), "" when the experiment declares none:
  // findings pool their pairs per seed and add the seed-to-seed spread to the SE (findings.h).
  std::string seed_variable;
  std::vector<std::string> slurm_setup;      // shell lines from slurm.setup
  std::vector<StageInstance> stages;         // dependency order (inputs first)
  std::vector<Finding> findings;             // in file order

  const StageInstance* find(const std::string& id) const;
};

// The instance's value of a sweep variable, "" when the instance does not depend on it.
std::string point_value(const StageInstance& instance, const std::string& variable);

// Whether the instance's sweep point has every (variable, value) of `where`.
bool instance_matches(const StageInstance& instance,
                      const std::vector<std::pair<std::string, std::string>>& where);

// Tools that checkpoint and continue with --resume (docs/qat.md, docs/grpo.md): `rqat run` and
// the SLURM scripts add it when the stage's directory holds a checkpoint.
bool takes_resume(const StageInstance& stage);

// plan.json: the plan as JSON, and back (for report and plot).
io::Json plan_to_json(const ExperimentPlan& plan);
ExperimentPlan plan_from_json(const io::Json& json);
void write_plan(const std::filesystem::path& file, const ExperimentPlan& plan);
ExperimentPlan read_plan(const std::filesystem::path& file);

}  // namespace rqat::experiment
