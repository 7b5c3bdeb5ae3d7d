// One GRPO step, as the Trainer (train/trainer.h) runs it: rollouts of this process's share of
// the step's prompts (rl/rollouts.h), rewards and advantages (rl/scoring.h), then `epochs` passes
// of `minibatches` policy updates each over the samples that train, with the clipped surrogate
// loss (rl/grpo_objective.h). Before the first update the log-probabilities of the policy as it
// was (the "old" policy) and of the reference policy are computed once, in the layout of the first
// pass, so that the first update sees a ratio of exactly 1.
//
// Host syncs: the statistics of the loss stay tensors on the device; each optimizer update reads
// its loss once (the NaN guard and the all-reduce need it) and the step reads its statistics once,
// at the end.
#pragma once

#include <memory>
#include <vector>

#include "model/decoder.h"
#include "rl/grpo_objective.h"
#include "rl/policy_logprobs.h"
#include "rl/rewards.h"
#include "rl/rollouts.h"
#include "rl/scoring.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace rqat::rl {

struct GrpoStepOptions {
  int64_t prompts_per_step = 8;  // over all processes
  RolloutOptions rollout;
  ScoringOptions scoring;
  GrpoLossOptions loss;
  double temperature = 1.0;      // of the training forward, as the rollouts'
  int64_t epochs = 1;            // passes over each rollout batch
  int64_t minibatches = 1;       // optimizer updates per pass
  int64_t micro_batch_size = 0;  // sequences per forward/backward (0: a whole minibatch)
  int64_t pad_id = 0;
  c10::Device device = c10::kCPU;
  // Sharded layers communicate inside every forward (and backward) pass, so every rank must run
  // as many passes as the busiest one: the others run zero-weighted passes over a padding row.
  bool lockstep = false;
};

class GrpoStep {
 public:
  // `reference` (may be null): the frozen reference policy, for the KL penalty. Everything
  // referenced outlives the step.
  GrpoStep(model::CausalLM& policy, model::CausalLM* reference,
           std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
           const std::vector<RlPrompt>& prompts, const RewardFunction& reward,
           train::Communicator& comm, GrpoStepOptions options);

  train::StepOutcome operator()(train::TrainStep& step);

  // The mean reward of every step this process ran.
  const std::vector<double>& mean_rewards() const { return mean_rewards_; }

 private:
  struct UpdateTotals;
  // With one epoch of one minibatch the policy that sampled is the one updated: the training
  // forward's own log-probs are the old ones (ratio exactly 1), no extra forward.
  bool old_policy_is_current() const { return options_.epochs == 1 && options_.minibatches == 1; }
  // How many forward/backward passes to run for `chunks` of this rank's: the most of any rank
  // with `lockstep`, else the chunks (communicates with lockstep).
  int64_t pass_count(size_t chunks);
  // A one-row batch (the first prompt and one padding token) for the extra lockstep passes.
  PolicyBatch padding_batch() const;
  void compute_old_and_reference_logprobs(std::vector<Sample>& samples,
                                          const std::vector<size_t>& rows);
  void run_updates(train::TrainStep& step, std::vector<Sample>& samples,
                   const std::vector<size_t>& rows, UpdateTotals& totals);
  train::StepOutcome outcome(const std::vector<Sample>& samples, const Scored& scored,
                             const UpdateTotals& totals, double rollout_seconds,
                             double train_seconds);
  // A few of the step's completions with their prompts, gold answers and rewards, in markdown.
  std::string samples_markdown(const std::vector<Sample>& samples) const;

  model::CausalLM& policy_;
  model::CausalLM* reference_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  const std::vector<RlPrompt>& prompts_;
  const RewardFunction& reward_;
  train::Communicator& comm_;
  GrpoStepOptions options_;
  std::vector<double> mean_rewards_;
};

}  // namespace rqat::rl
