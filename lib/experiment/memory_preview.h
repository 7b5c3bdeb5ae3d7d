// `rqat run --dry-run`'s memory plan of each training stage (qat-sft, qat-kd, grpo) that asks for
// GPUs: `rqat plan-memory` run as a child process with the stage's own flags (this layer is text
// only and cannot link the planner in lib/train), its world size nodes x gpus, and the GPU memory
// of its resources (gpu_memory_gb), so that a stage which will not fit is named before it is
// submitted (docs/distributed.md "Memory plan").
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

// The arguments after `rqat` for the stage's plan: plan-memory, --tool, --world-size,
// --gpu-memory, the model's config (the stage's --model, or, when that is the output of an
// earlier stage that does not exist yet, the model that stage started from), then the stage's
// flags the planner reads. Empty for stages that are not training or ask for no GPU.
std::vector<std::string> plan_memory_args(const ExperimentPlan& plan, const StageInstance& stage);

// Runs `bin_dir/rqat plan-memory` for the stage and returns its output (the table and a warning
// when the stage does not fit) indented by `indent`, or one line saying why there is no plan;
// "" when the stage gets none. `cache` keeps the output per argument list: sweep points that
// train the same shape share one plan.
std::string stage_memory_plan(const ExperimentPlan& plan, const StageInstance& stage,
                              const std::filesystem::path& bin_dir, const std::string& indent,
                              std::map<std::vector<std::string>, std::string>& cache);

}  // namespace rqat::experiment
