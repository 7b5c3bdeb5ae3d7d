// Flags of the generation engine that every generating tool shares (eval-math, rqat generate,
// rqat traces, grpo rollouts): batch size and the KV memory budget, declared once here.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "generation/generation_engine.h"

namespace rqat::cli {

// batch_flag names the batch option ("--max-batch"; grpo calls it "--rollout-batch").
void add_engine_flags(CLI::App& app, generation::EngineOptions& options,
                      const std::string& batch_flag = "--max-batch");

}  // namespace rqat::cli
