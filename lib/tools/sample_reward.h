// eval-math --reward: an rl reward spec (rl/rewards.h, e.g. study A's
// "math_boxed+format_last_box") as the evaluation's per-sample score. The evaluation sits below
// rl, so the tool layer joins the two.
#pragma once

#include <string>

#include "tools/eval_run/evaluate.h"

namespace rqat::tools {

// The reward named by `spec` as an eval::SampleReward; errors name `flag` and the spec.
eval::SampleReward sample_reward(const std::string& spec, const std::string& flag = "--reward");

}  // namespace rqat::tools
