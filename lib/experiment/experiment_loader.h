// Reading an experiment file (docs/experiments.md) into an ExperimentPlan: YAML with --set
// overrides, validation with file:line:column messages, ${...} interpolation, sweep expansion,
// sharing of identical stage instances and dependency ordering.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

struct PlanOptions {
  std::filesystem::path experiment_file;
  std::vector<std::string> overrides;  // "KEY=VALUE" from --set, applied in order
  std::optional<std::filesystem::path>
      run_dir;  // --out; default: the file's `out`, else runs/<name>
};

// Throws rqat::Error "FILE:LINE:COL: message" on the first problem found.
ExperimentPlan load_experiment_plan(const PlanOptions& options);

}  // namespace rqat::experiment
