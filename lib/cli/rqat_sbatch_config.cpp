// See rqat_sbatch_config.h.
#include "cli/rqat_sbatch_config.h"

#include <filesystem>
#include <ostream>
#include <set>

#include "experiment/experiment_loader.h"
#include "experiment/slurm_scripts.h"
#include "experiment/stage_process.h"
#include "experiment/tool_flags.h"

namespace rqat::cli {

namespace fs = std::filesystem;

void SbatchConfig::run(std::ostream& log, std::ostream& err) const {
  experiment::PlanOptions plan_options;
  plan_options.experiment_file = experiment;
  plan_options.overrides = overrides;
  if (!run_dir.empty()) plan_options.run_dir = run_dir;
  plan_options.limits = limits;
  const auto plan = experiment::load_experiment_plan(plan_options);

  experiment::SlurmOptions options;
  options.work_dir = fs::current_path();
  options.out_dir = out.empty() ? plan.run_dir / "slurm" : fs::path(out);
  options.bin_dir = bin_dir.empty() ? experiment::current_executable_dir() : fs::absolute(bin_dir);
  // The scripts may be written on a machine without the tools; say so rather than fail, and
  // check every stage's flags against the tools when they are here.
  std::set<std::string> missing;
  for (const auto& instance : plan.stages) {
    const fs::path binary = options.bin_dir / instance.program;
    if (!fs::exists(binary) && missing.insert(instance.program).second)
      err << "warning: " << binary.string() << " does not exist (here): flags not checked\n";
  }
  if (missing.empty()) experiment::check_stage_flags(plan, options.bin_dir);
  const auto scripts = experiment::write_slurm_scripts(plan, options);

  for (const auto& script : scripts) {
    log << "wrote " << script.file.string() << " (" << script.instance_ids.size()
        << (script.instance_ids.size() == 1 ? " instance)" : " instances, job array)") << "\n";
  }
  const fs::path out_dir = scripts.front().file.parent_path();
  log << "wrote " << (out_dir / "submit.sh").string() << " and " << (out_dir / "plan.txt").string()
      << "\n";
  if (submit) {
    const auto ids = experiment::submit_slurm_scripts(scripts);
    for (size_t i = 0; i < scripts.size(); ++i)
      log << "submitted " << scripts[i].stage << ": job " << ids[i] << "\n";
  }
}

}  // namespace rqat::cli
