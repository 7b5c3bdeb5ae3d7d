// Checking a plan's arguments against the tools before anything runs: a misspelt flag in an
// experiment file is reported with the stage's line at once, not when its stage starts hours later.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"

namespace rqat::experiment {

// The long flags (--name) a tool's --help lists; `subcommand` empty for a plain tool.
std::set<std::string> read_tool_flags(const std::filesystem::path& program,
                                      const std::string& subcommand);

// Throws rqat::Error "FILE:LINE:COL: stage ID: TOOL has no flag --X" for the first unknown flag.
void check_stage_flags(const ExperimentPlan& plan, const std::filesystem::path& bin_dir);

}  // namespace rqat::experiment
