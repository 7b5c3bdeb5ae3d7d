// See rqat_run_config.h.
#include "cli/rqat_run_config.h"

#include <filesystem>

#include "cli/rqat_flag_checks.h"
#include "experiment/experiment_loader.h"
#include "experiment/stage_process.h"

namespace rqat::cli {

int ExperimentRunConfig::run(std::ostream& out) const {
  require_at_least("--jobs", runs.jobs, 1);
  experiment::PlanOptions plan_options{experiment, overrides, std::nullopt};
  if (!run_dir.empty()) plan_options.run_dir = run_dir;
  plan_options.limits = limits;
  const auto plan = experiment::load_experiment_plan(plan_options);
  experiment::RunOptions options = runs;
  options.bin_dir =
      bin_dir.empty() ? experiment::current_executable_dir() : std::filesystem::path(bin_dir);
  return experiment::run_plan(plan, options, out);
}

}  // namespace rqat::cli
