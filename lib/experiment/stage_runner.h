// `rqat run`: executes an ExperimentPlan stage by stage, each stage as its own process of its tool,
// skipping stages whose manifest records the same arguments (so a rerun only does what is missing),
// stopping the dependants of a failed stage and keeping everything that finished.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

struct RunOptions {
  std::filesystem::path bin_dir;   // where ptq, qat-kd, ... and rqat live
  int jobs = 1;                    // stages run at once
  bool dry_run = false;            // print the plan and what would run; run nothing
  std::vector<std::string> only;   // stage names: run these and what they need (empty: all)
  std::vector<std::string> force;  // stage names: rerun even when finished
};

// True when the stage's directory holds a manifest whose arguments are the planned ones (ignoring
// the program path and a --resume the runner added), or, for tools that write no manifest, when the
// runner's own record (logs/<id>.json) says it finished with these arguments; and, for a stage with
// inputs, when none of them ran again after it (the record keeps their manifests' times).
bool stage_is_finished(const ExperimentPlan& plan, const StageInstance& stage);

// True when the stage's manifest.json records the planned arguments (ignoring the program path
// and a --resume the runner added); false when there is none or it cannot be read.
bool manifest_records_arguments(const StageInstance& stage);

// The runner's record of a stage: <run_dir>/logs/<id>.log and .json.
std::filesystem::path stage_log_file(const ExperimentPlan& plan, const StageInstance& stage);
std::filesystem::path stage_record_file(const ExperimentPlan& plan, const StageInstance& stage);

// A training stage (qat-*, grpo) restarts with --resume only when its last attempt was interrupted
// or failed with the same arguments and inputs; otherwise its old checkpoints are removed first.
//
// Runs (or, with dry_run, describes) the plan; returns the process exit code: 0 when every selected
// stage finished, 1 when one failed, 128+signal when interrupted by SIGINT/SIGTERM.
int run_plan(const ExperimentPlan& plan, const RunOptions& options, std::ostream& out);

}  // namespace rqat::experiment
