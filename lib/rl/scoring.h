// Scoring GRPO's samples: each completion's reward (rl/rewards.h), the group-relative advantages
// (rl/grpo_objective.h), and the choice of the samples that train.
#pragma once

#include <cstdint>
#include <vector>

#include "rl/grpo_objective.h"
#include "rl/rewards.h"
#include "rl/rollouts.h"

namespace rqat::rl {

struct ScoringOptions {
  int num_generations = 8;  // G: the size of each group of rewards
  AdvantageMode advantage = AdvantageMode::kGroupNormalized;
  bool mask_truncated = false;         // completions cut at max_new_tokens do not train
  bool skip_degenerate_groups = true;  // groups with equal rewards (zero advantage) do not train
};

struct Scored {
  std::vector<size_t> training_rows;  // the samples that train, in sample order
  int64_t degenerate_groups = 0;
};

// Fills reward, accuracy (the "math"/"math_boxed" part) and advantage of every sample (group-major,
// as generate_rollouts returns them) and returns the samples that train: not empty, not masked as
// truncated, not in a skipped degenerate group.
Scored score_samples(std::vector<Sample>& samples, const std::vector<RlPrompt>& prompts,
                     const RewardFunction& reward, const ScoringOptions& options);

}  // namespace rqat::rl
