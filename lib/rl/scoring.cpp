#include "rl/scoring.h"

namespace rqat::rl {

Scored score_samples(std::vector<Sample>& samples, const std::vector<RlPrompt>& prompts,
                     const RewardFunction& reward, const ScoringOptions& options) {
  std::vector<RewardInput> inputs;
  for (const auto& s : samples) {
    const auto& p = prompts[s.prompt];
    inputs.push_back({s.text, p.gold, p.problem, s.truncated});
  }
  const auto scores = score_batch(reward, inputs, 0);
  std::vector<double> rewards;
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].reward = scores[i].total;
    for (const auto& part : scores[i].parts)
      if (part.name == "math" || part.name == "math_boxed") samples[i].accuracy = part.value;
    rewards.push_back(scores[i].total);
  }
  const Advantages advantages =
      group_advantages(rewards, options.num_generations, options.advantage);
  Scored out;
  out.degenerate_groups = advantages.degenerate_groups;
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].advantage = advantages.values[i];
    const bool degenerate =
        advantages.degenerate_group[i / static_cast<size_t>(options.num_generations)] != 0;
    const bool masked = options.mask_truncated && samples[i].truncated;
    if (samples[i].completion.empty() || masked || (options.skip_degenerate_groups && degenerate))
      continue;
    out.training_rows.push_back(i);
  }
  return out;
}

}  // namespace rqat::rl
