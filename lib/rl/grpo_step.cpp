#include "rl/grpo_step.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <span>

#include "ops/host_copy.h"
#include "rl/policy_logprobs.h"

namespace rqat::rl {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Each row's values where its mask is set, read back in one copy for all rows (a masked_select
// per row made the host wait for the device once per sequence).
std::vector<std::vector<float>> masked_rows(const at::Tensor& values, const at::Tensor& mask) {
  const at::Tensor host =
      ops::copy_to_host(at::stack({values.to(at::kFloat), mask.to(at::kFloat)})).contiguous();
  const int64_t rows = values.size(0), columns = values.size(1);
  const float* v = host.data_ptr<float>();
  const float* m = v + rows * columns;
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < columns; ++t)
      if (m[r * columns + t] != 0) out[static_cast<size_t>(r)].push_back(v[r * columns + t]);
  return out;
}

// Consecutive chunks of at most `micro` rows (0: one chunk) of a minibatch; none is empty (an
// empty minibatch has no chunk).
std::vector<std::span<const size_t>> micro_chunks(const std::vector<size_t>& minibatch,
                                                  int64_t micro) {
  std::vector<std::span<const size_t>> chunks;
  const size_t size =
      micro > 0 ? static_cast<size_t>(micro) : std::max<size_t>(1, minibatch.size());
  for (size_t b = 0; b < minibatch.size(); b += size)
    chunks.emplace_back(minibatch.data() + b, std::min(size, minibatch.size() - b));
  return chunks;
}

// `order` dealt into `count` minibatches of (nearly) equal size, keeping the order.
std::vector<std::vector<size_t>> split_minibatches(const std::vector<size_t>& order,
                                                   int64_t count) {
  std::vector<std::vector<size_t>> out(static_cast<size_t>(count));
  for (size_t k = 0; k < order.size(); ++k)
    out[k * out.size() / std::max<size_t>(1, order.size())].push_back(order[k]);
  return out;
}

}  // namespace

// Sums over this process's micro-batches, as float64 tensors on the device (read once per step).
struct GrpoStep::UpdateTotals {
  at::Tensor clip, kl, ratio, tokens, entropy, entropy_tokens;  // 0-dim float64
  double loss_sum = 0;  // global losses of the applied updates
  int64_t updates = 0;  // applied or skipped
};

GrpoStep::GrpoStep(model::CausalLM& policy, model::CausalLM* reference,
                   std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                   const std::vector<RlPrompt>& prompts, const RewardFunction& reward,
                   train::Communicator& comm, GrpoStepOptions options)
    : policy_(policy),
      reference_(reference),
      tokenizer_(std::move(tokenizer)),
      prompts_(prompts),
      reward_(reward),
      comm_(comm),
      options_(std::move(options)) {}

int64_t GrpoStep::pass_count(size_t chunks) {
  const auto mine = static_cast<int64_t>(chunks);
  return options_.lockstep ? comm_.all_reduce_max(mine) : mine;
}

PolicyBatch GrpoStep::padding_batch() const {
  static const int32_t kPadding[1] = {0};
  const PolicySequence row{prompts_.front().ids, std::span<const int32_t>(kPadding, 1)};
  return make_policy_batch(std::span<const PolicySequence>(&row, 1), options_.pad_id,
                           options_.device);
}

void GrpoStep::compute_old_and_reference_logprobs(std::vector<Sample>& samples,
                                                  const std::vector<size_t>& rows) {
  const bool old_is_current = old_policy_is_current();
  if (old_is_current && !reference_) return;
  torch::NoGradGuard no_grad;
  const auto minibatches = split_minibatches(rows, options_.minibatches);
  std::vector<std::span<const size_t>> chunks;
  for (const auto& minibatch : minibatches)
    for (auto chunk : micro_chunks(minibatch, options_.micro_batch_size)) chunks.push_back(chunk);
  const int64_t passes = pass_count(chunks.size());
  for (int64_t k = 0; k < passes; ++k) {
    if (k >= static_cast<int64_t>(chunks.size())) {  // a lockstep pass, its values unused
      const PolicyBatch batch = padding_batch();
      if (!old_is_current) policy_logprobs(policy_, batch, options_.temperature, false);
      if (reference_) policy_logprobs(*reference_, batch, options_.temperature, false);
      continue;
    }
    const auto chunk = chunks[static_cast<size_t>(k)];
    std::vector<PolicySequence> seqs;
    for (size_t i : chunk) seqs.push_back({prompts_[samples[i].prompt].ids, samples[i].completion});
    const PolicyBatch batch = make_policy_batch(seqs, options_.pad_id, options_.device);
    const auto fill = [&](model::CausalLM& model, auto member) {
      const PolicyLogprobs lp = policy_logprobs(model, batch, options_.temperature, false);
      auto rows_of_chunk = masked_rows(lp.logp, batch.completion_mask);
      for (size_t j = 0; j < chunk.size(); ++j)
        samples[chunk[j]].*member = std::move(rows_of_chunk[j]);
    };
    if (!old_is_current) fill(policy_, &Sample::old_logp);
    if (reference_) fill(*reference_, &Sample::ref_logp);
  }
}

void GrpoStep::run_updates(train::TrainStep& step, std::vector<Sample>& samples,
                           const std::vector<size_t>& rows, UpdateTotals& totals) {
  const bool old_is_current = old_policy_is_current();
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(options_.device);
  for (at::Tensor* t : {&totals.clip, &totals.kl, &totals.ratio, &totals.tokens, &totals.entropy,
                        &totals.entropy_tokens})
    *t = torch::zeros({}, f64);
  std::vector<size_t> order = rows;
  for (int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    if (epoch > 0) {
      std::mt19937_64 rng(
          mix_seed(mix_seed(options_.rollout.seed, static_cast<uint64_t>(step.index)),
                   1000 + static_cast<uint64_t>(epoch)));
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    }
    for (const auto& minibatch : split_minibatches(order, options_.minibatches)) {
      // Weights make micro-batches and ranks add up to the minibatch's aggregation.
      int64_t local_tokens = 0;
      for (size_t i : minibatch) local_tokens += static_cast<int64_t>(samples[i].completion.size());
      const int64_t global_rows = comm_.all_reduce_sum(static_cast<int64_t>(minibatch.size()));
      const int64_t global_tokens = comm_.all_reduce_sum(local_tokens);
      at::Tensor local_loss = torch::zeros({}, f64);
      const auto chunks = micro_chunks(minibatch, options_.micro_batch_size);
      const int64_t passes = pass_count(chunks.size());
      for (int64_t k = 0; k < passes; ++k) {
        if (k >= static_cast<int64_t>(chunks.size())) {  // a lockstep pass: zero gradient
          const PolicyLogprobs lp =
              policy_logprobs(policy_, padding_batch(), options_.temperature, false);
          (lp.logp.sum() * 0.0).backward();
          continue;
        }
        const auto chunk = chunks[static_cast<size_t>(k)];
        std::vector<PolicySequence> seqs;
        std::vector<std::span<const float>> old_rows, ref_rows, rollout_rows;
        std::vector<double> advantages;
        for (size_t i : chunk) {
          seqs.push_back({prompts_[samples[i].prompt].ids, samples[i].completion});
          old_rows.emplace_back(samples[i].old_logp);
          ref_rows.emplace_back(samples[i].ref_logp);
          rollout_rows.emplace_back(samples[i].rollout_logp);
          advantages.push_back(samples[i].advantage);
        }
        const PolicyBatch batch = make_policy_batch(seqs, options_.pad_id, options_.device);
        const PolicyLogprobs lp = policy_logprobs(policy_, batch, options_.temperature, epoch == 0);
        const at::Tensor old_logp =
            old_is_current ? lp.logp.detach() : align_completion_values(batch, old_rows);
        const at::Tensor ref_logp =
            reference_ ? align_completion_values(batch, ref_rows) : at::Tensor();
        const at::Tensor rollout_logp =
            options_.loss.tis_cap > 0 ? align_completion_values(batch, rollout_rows) : at::Tensor();
        // Advantages stay on the host side of grpo_loss's check (finite), then move.
        const GrpoLoss l = grpo_loss(lp.logp, old_logp, batch.completion_mask,
                                     torch::tensor(advantages, at::kDouble).to(at::kFloat),
                                     options_.loss, ref_logp, rollout_logp);
        const double weight =
            options_.loss.aggregation == LossAggregation::kTokenMean
                ? static_cast<double>(batch.completion_tokens) / std::max<int64_t>(1, global_tokens)
                : static_cast<double>(chunk.size()) / std::max<int64_t>(1, global_rows);
        (l.loss * weight).backward();
        local_loss += l.loss.detach().to(at::kDouble) * weight;
        totals.clip += l.clip_fraction * l.tokens;
        totals.kl += l.kl * l.tokens;
        totals.ratio += l.mean_ratio * l.tokens;
        totals.tokens += l.tokens;
        if (epoch == 0) {
          totals.entropy += lp.entropy.sum().to(at::kDouble);
          totals.entropy_tokens += static_cast<double>(batch.completion_tokens);
        }
      }
      ++totals.updates;
      if (global_rows == 0) {  // every group degenerate: nothing to learn from
        step.updates.skip();
        continue;
      }
      totals.loss_sum += step.updates.apply(local_loss.item<double>()).loss;
    }
  }
}

train::StepOutcome GrpoStep::outcome(const std::vector<Sample>& samples, const Scored& scored,
                                     const UpdateTotals& totals, double rollout_seconds,
                                     double train_seconds) {
  // The device statistics, read once.
  const at::Tensor device_stats = torch::stack({totals.clip, totals.kl, totals.ratio, totals.tokens,
                                                totals.entropy, totals.entropy_tokens})
                                      .to(at::kCPU);
  const double* d = device_stats.data_ptr<double>();
  const double clip_sum = d[0], kl_sum = d[1], ratio_sum = d[2], stat_tokens = d[3];
  const double entropy_sum = d[4], entropy_tokens = d[5];

  double lengths = 0, max_length = 0, truncated = 0, reward_sum = 0, acc_sum = 0;
  std::vector<double> advs;
  for (const auto& s : samples) {
    lengths += static_cast<double>(s.completion.size());
    max_length = std::max(max_length, static_cast<double>(s.completion.size()));
    truncated += s.truncated;
    reward_sum += s.reward;
    acc_sum += s.accuracy;
    advs.push_back(s.advantage);
  }
  const double n = comm_.all_reduce_sum(static_cast<double>(samples.size()));
  const double mean_reward = comm_.all_reduce_sum(reward_sum) / n;
  const double mean_adv =
      std::accumulate(advs.begin(), advs.end(), 0.0) / std::max<size_t>(1, advs.size());
  double adv_abs_max = 0;
  for (double a : advs) adv_abs_max = std::max(adv_abs_max, std::abs(a));
  // Each sum over processes once: every all-reduce is a collective all ranks must make.
  const double global_stat_tokens = comm_.all_reduce_sum(stat_tokens);
  const double tokens = std::max(1.0, global_stat_tokens);
  const double global_lengths = comm_.all_reduce_sum(lengths);

  train::StepOutcome out;
  out.loss = totals.loss_sum / static_cast<double>(std::max<int64_t>(1, totals.updates));
  out.target_tokens = static_cast<int64_t>(global_stat_tokens);
  out.tokens = static_cast<int64_t>(global_lengths);
  out.metrics = {
      {"reward", mean_reward},
      {"accuracy", comm_.all_reduce_sum(acc_sum) / n},
      {"response_length", global_lengths / n},
      {"response_length_max", max_length},
      {"truncated_share", comm_.all_reduce_sum(truncated) / n},
      {"entropy",
       comm_.all_reduce_sum(entropy_sum) / std::max(1.0, comm_.all_reduce_sum(entropy_tokens))},
      {"kl", comm_.all_reduce_sum(kl_sum) / tokens},
      {"clip_fraction", comm_.all_reduce_sum(clip_sum) / tokens},
      {"ratio", comm_.all_reduce_sum(ratio_sum) / tokens},
      {"advantage_mean", mean_adv},
      {"advantage_abs_max", adv_abs_max},
      {"degenerate_groups", comm_.all_reduce_sum(scored.degenerate_groups)},
      {"trained_samples", comm_.all_reduce_sum(static_cast<int64_t>(scored.training_rows.size()))},
      {"rollout_seconds", rollout_seconds},
      {"train_seconds", train_seconds}};
  const auto& m = out.metrics;
  out.progress = fmt::format(
      " | reward {:.3f} | acc {:.3f} | len {:.1f} | entropy {:.3f} | kl {:.4f} | clip {:.3f} | "
      "skipped groups {} | rollout {:.1f}s train {:.1f}s",
      mean_reward, m["accuracy"].get<double>(), m["response_length"].get<double>(),
      m["entropy"].get<double>(), m["kl"].get<double>(), m["clip_fraction"].get<double>(),
      m["degenerate_groups"].get<int64_t>(), rollout_seconds, train_seconds);
  out.text = samples_markdown(samples);
  mean_rewards_.push_back(mean_reward);
  return out;
}

std::string GrpoStep::samples_markdown(const std::vector<Sample>& samples) const {
  // The first group's first samples and the first sample of the next groups: what the policy
  // writes for one prompt, and for a few others.
  constexpr size_t kShown = 4;
  std::vector<size_t> shown;
  const size_t group = static_cast<size_t>(std::max<int64_t>(1, options_.rollout.num_generations));
  for (size_t i = 0; i < samples.size() && shown.size() < kShown / 2 && i < group; ++i)
    shown.push_back(i);
  for (size_t i = group; i < samples.size() && shown.size() < kShown; i += group) shown.push_back(i);
  std::string text;
  for (const size_t i : shown) {
    const Sample& s = samples[i];
    const RlPrompt& p = prompts_[s.prompt];
    text += fmt::format(
        "**prompt {}** (gold `{}`): reward {:.3f}, accuracy {:.0f}{}\n\n```\n{}\n```\n\n", p.id,
        p.gold, s.reward, s.accuracy, s.truncated ? ", truncated" : "", s.text);
  }
  return text;
}

train::StepOutcome GrpoStep::operator()(train::TrainStep& step) {
  const auto step_start = Clock::now();
  const int64_t per_rank = options_.prompts_per_step / comm_.world_size();
  const auto mine = step.batch.subspan(static_cast<size_t>(comm_.rank() * per_rank),
                                       static_cast<size_t>(per_rank));
  std::vector<Sample> samples;
  {
    // Rollouts decode from whole weights (a sharded policy is gathered once for all of them,
    // as verl hands FSDP weights to its rollout engine).
    train::WholeModels whole(step.updates.optimizer());
    samples = generate_rollouts(policy_, tokenizer_, prompts_, mine, step.index, options_.rollout);
  }
  const double rollout_seconds = seconds_since(step_start);

  const auto train_start = Clock::now();
  const Scored scored = score_samples(samples, prompts_, reward_, options_.scoring);
  compute_old_and_reference_logprobs(samples, scored.training_rows);
  UpdateTotals totals;
  run_updates(step, samples, scored.training_rows, totals);
  return outcome(samples, scored, totals, rollout_seconds, seconds_since(train_start));
}

}  // namespace rqat::rl
