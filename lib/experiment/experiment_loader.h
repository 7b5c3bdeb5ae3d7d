// Reading an experiment file (docs/experiments.md) into an ExperimentPlan: YAML with --set
// overrides, validation with file:line:column messages, ${...} interpolation, sweep expansion,
// sharing of identical stage instances and dependency ordering.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"
#include "experiment/experiment_source.h"

namespace rqat::experiment {

struct PlanOptions {
  // The file to read; for load_experiment_plan_from_text only the text's name (in messages, as
  // ${experiment_dir}'s directory and as the plan's experiment_file), never opened.
  std::filesystem::path experiment_file;
  std::vector<std::string> overrides;  // "KEY=VALUE" from --set, applied in order
  std::optional<std::filesystem::path>
      run_dir;                   // --out; default: the file's `out`, else runs/<name>
  ExperimentLimits limits = {};  // --max-yaml-nodes, --max-sweep-points
  // Look up the input paths the stages name (model, data, ...) to list the missing ones; off, the
  // plan is made without touching the file system (what a fuzzer wants).
  bool check_input_paths = true;
};

// Throws rqat::Error "FILE:LINE:COL: message" on the first problem found.
ExperimentPlan load_experiment_plan(const PlanOptions& options);

// The same from YAML text in memory: parses, validates, interpolates and expands the sweep into
// the plan, runs nothing and writes nothing. load_experiment_plan reads the file and calls this.
ExperimentPlan load_experiment_plan_from_text(const std::string& yaml_text,
                                              const PlanOptions& options);

}  // namespace rqat::experiment
