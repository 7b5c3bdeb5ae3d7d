#include "rl/grpo_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>

#include "generation/generation_engine.h"
#include "generation/sampler.h"
#include "io/error.h"
#include "io/manifest.h"
#include "model/model_dir.h"
#include "quant/quant_state.h"
#include "rl/policy_logprobs.h"
#include "rl/rewards.h"
#include "tokenizer/tokenizer.h"
#include "train/lora_model.h"
#include "train/qat_model.h"
#include "train/training_batches.h"
#include "train/training_run.h"

namespace rqat::rl {
namespace fs = std::filesystem;

PolicyMode parse_policy_mode(const std::string& name, const std::string& flag) {
  if (name == "full") return PolicyMode::kFull;
  if (name == "qat") return PolicyMode::kQat;
  if (name == "qlora") return PolicyMode::kQlora;
  fail("{}: unknown policy mode '{}' (expected full, qat or qlora)", flag, name);
}

const char* policy_mode_name(PolicyMode mode) {
  switch (mode) {
    case PolicyMode::kFull:
      return "full";
    case PolicyMode::kQat:
      return "qat";
    case PolicyMode::kQlora:
      return "qlora";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Prompt {
  std::string id, problem, gold;
  std::vector<int32_t> ids;
};

std::vector<Prompt> load_prompts(const GrpoCommandOptions& o, const tokenizer::Tokenizer& tok) {
  auto problems = eval::load_benchmark(o.data, o.fields);
  if (o.max_prompts > 0 && o.max_prompts < problems.size()) problems.resize(o.max_prompts);
  if (problems.empty()) fail("--data {}: no prompts", o.data.string());
  std::vector<std::string> texts;
  for (const auto& p : problems) texts.push_back(p.problem);
  bool add_special = true;
  const auto rendered = eval::render_problem_prompts(texts, o.prompt, o.model_dir, add_special);
  std::vector<Prompt> out;
  for (size_t i = 0; i < problems.size(); ++i) {
    Prompt p{problems[i].id, problems[i].problem, problems[i].gold, {}};
    for (auto id : tok.encode(rendered[i], add_special)) p.ids.push_back(id);
    out.push_back(std::move(p));
  }
  return out;
}

// The prompts as a SequenceSet, so the trainers' StepSampler draws them (seeded, epoch-wise,
// resumable, independent of the number of processes).
train::SequenceSet prompt_sequences(const std::vector<Prompt>& prompts) {
  train::SequenceSet set;
  set.layout = train::SequenceLayout::kPacked;
  for (const auto& p : prompts) {
    train::TrainingSequence s;
    s.tokens.assign(p.ids.begin(), p.ids.end());
    s.loss_mask.assign(p.ids.size(), 1);
    set.max_length = std::max<int64_t>(set.max_length, static_cast<int64_t>(p.ids.size()));
    set.sequences.push_back(std::move(s));
  }
  return set;
}

// The policy and what it exports, by mode.
struct Policy {
  std::shared_ptr<model::CausalLM> model;
  quant::QuantSpec spec;
  bool quantized = false;  // qat: fake-quantized layers to materialize at export
  std::vector<std::string> lora_layers;
};

Policy load_policy(const GrpoCommandOptions& o, c10::Device device) {
  Policy p;
  p.model = model::load_causal_lm(o.model_dir, model::LoadOptions{at::kFloat, device});
  if (o.mode == PolicyMode::kFull) return p;
  const train::QuantPlan plan = train::plan_quantization(o.model_dir, o.bits, o.spec, o.init);
  std::vector<std::string> layers;
  p.spec =
      train::attach_quant_plan(*p.model, plan, o.model_dir, o.bits, o.fake_quant, false, layers);
  if (o.mode == PolicyMode::kQat) {
    p.quantized = plan.quantize;
    return p;
  }
  // qlora: the quantized weights become the frozen base (exactly the dequantized codes).
  if (plan.quantize) train::materialize_fake_quant(*p.model, p.spec);
  p.lora_layers = train::attach_lora(*p.model, o.lora, o.lora_targets);
  return p;
}

// Seeds derived from the run seed, the step and a prompt or epoch: a resumed run (or another
// number of processes) draws the same rollouts and minibatch orders.
uint64_t mix(uint64_t a, uint64_t b) {
  return generation::sample_seed(a, b);
}

// One completion of the step, with what training needs.
struct Sample {
  size_t prompt = 0;
  std::vector<int32_t> completion;
  std::vector<float> rollout_logp;  // tempered log-probs from the engine
  std::vector<float> old_logp;      // the policy before this step's updates (training forward)
  std::vector<float> ref_logp;
  double reward = 0, accuracy = 0, advantage = 0;
  bool truncated = false;
};

std::vector<float> row_values(const at::Tensor& values, const at::Tensor& mask, int64_t row) {
  const at::Tensor v = values[row].masked_select(mask[row]).to(at::kCPU).contiguous();
  return {v.data_ptr<float>(), v.data_ptr<float>() + v.numel()};
}

}  // namespace

GrpoCommandResult run_grpo_command(const GrpoCommandOptions& o, std::ostream& out) {
  if (o.out_dir.empty()) fail("--out is required");
  if (!fs::is_regular_file(o.data)) fail("--data {}: file not found", o.data.string());
  if (o.group_size < 2)
    fail("--group-size must be >= 2 (advantages compare samples), got {}", o.group_size);
  if (o.prompts_per_step < 1) fail("--prompts-per-step must be >= 1, got {}", o.prompts_per_step);
  if (o.epochs < 1) fail("--epochs must be >= 1, got {}", o.epochs);
  if (o.minibatches < 1) fail("--minibatches must be >= 1, got {}", o.minibatches);
  if (o.max_new_tokens < 1) fail("--max-new-tokens must be >= 1, got {}", o.max_new_tokens);
  if (!(o.temperature > 0))
    fail("--temperature must be > 0 for RL sampling, got {}", o.temperature);
  GrpoLossOptions loss_options = o.loss;
  if (loss_options.aggregation == LossAggregation::kConstantNormalizer)
    loss_options.max_response_tokens = o.max_new_tokens;
  const auto reward = make_reward(o.reward, "--reward");
  const auto config = model::ModelConfig::load(o.model_dir / "config.json");

  const train::DistributedEnv env = train::detect_distributed_env();
  const c10::Device device = o.device.is_cuda() && env.world_size > 1
                                 ? c10::Device(c10::kCUDA, static_cast<int8_t>(env.local_rank))
                                 : o.device;
  auto comm = train::Communicator::create(env, o.backend, device);
  if (o.prompts_per_step % comm->world_size() != 0)
    fail("--prompts-per-step {} must be a multiple of the number of processes ({})",
         o.prompts_per_step, comm->world_size());
  auto tokenizer = tokenizer::Tokenizer::load(o.model_dir);
  const auto prompts = load_prompts(o, *tokenizer);
  const train::SequenceSet prompt_set = prompt_sequences(prompts);

  Policy policy = load_policy(o, device);
  policy.model->set_activation_checkpointing(o.activation_checkpointing);
  std::shared_ptr<model::CausalLM> reference;
  if (loss_options.kl_beta > 0) {
    reference = load_policy(o, device).model;  // the policy as it starts, frozen
    for (auto& p : reference->parameters()) p.requires_grad_(false);
  }
  train::TrainingOptimizer optimizer(train::trainable_parameters(*policy.model), o.trainer.adamw);
  train::StepMetricsLog metrics(o.out_dir, comm->is_main());
  io::Json fingerprint = {
      {"tool", "grpo"},
      {"mode", policy_mode_name(o.mode)},
      {"model", o.model_dir.string()},
      {"data", o.data.string()},
      {"prompts", prompts.size()},
      {"quant",
       policy.quantized || !policy.lora_layers.empty() ? policy.spec.to_json() : io::Json(nullptr)},
      {"rollout",
       {{"prompts_per_step", o.prompts_per_step},
        {"group_size", o.group_size},
        {"temperature", o.temperature},
        {"top_p", o.top_p},
        {"top_k", o.top_k},
        {"max_new_tokens", o.max_new_tokens},
        {"reward", o.reward}}},
      {"objective",
       {{"advantage", advantage_mode_name(o.advantage)},
        {"aggregation", loss_aggregation_name(loss_options.aggregation)},
        {"clip_low", loss_options.clip_low},
        {"clip_high", loss_options.clip_high},
        {"kl_beta", loss_options.kl_beta},
        {"tis_cap", loss_options.tis_cap},
        {"epochs", o.epochs},
        {"minibatches", o.minibatches},
        {"mask_truncated", o.mask_truncated},
        {"skip_degenerate_groups", o.skip_degenerate_groups}}},
      {"optimizer", train::trainer_fingerprint(o.trainer)}};
  if (!policy.lora_layers.empty())
    fingerprint["lora"] = {{"rank", o.lora.rank},
                           {"alpha", o.lora.alpha},
                           {"dropout", o.lora.dropout},
                           {"targets", o.lora_targets}};
  train::TrainingRun run(*policy.model, optimizer, *comm, metrics, o.out_dir, fingerprint,
                         o.trainer.keep_checkpoints, "grpo");
  train::StepSampler sampler(prompt_set, o.prompts_per_step, o.trainer.seed);
  GrpoCommandResult result;
  if (const auto saved = run.start(o.trainer.resume, out)) {
    result.start_step = saved->at("step").get<int64_t>();
    sampler.restore(
        train::DataPosition::from_json(saved->at("data_position"), "trainer_state.json"));
  }
  if (result.start_step > o.trainer.steps)
    fail("--resume: the checkpoint is at step {}, past --steps {}", result.start_step,
         o.trainer.steps);
  train::LrSchedule schedule = o.trainer.lr;
  schedule.total_steps = o.trainer.steps * o.epochs * o.minibatches;
  schedule.validate();
  const int64_t pad_id = train::padding_token_id(*tokenizer);
  if (comm->is_main())
    out << fmt::format(
        "grpo ({}): {} prompts from {}, {} x {} samples per step, {} processes; {} trainable "
        "parameters\n",
        policy_mode_name(o.mode), prompts.size(), o.data.string(), o.prompts_per_step, o.group_size,
        comm->world_size(), optimizer.parameter_count());

  const auto evaluate = [&](int64_t step) {
    if (o.eval_benchmark.empty()) return;
    if (comm->is_main()) {
      const auto summary = eval::evaluate_model_in_memory(
          *policy.model, o.model_dir, o.eval_benchmark, o.eval_benchmark_data, o.eval_limit,
          o.eval_max_new_tokens, o.prompt, device,
          o.out_dir / "eval-math" / fmt::format("step-{:08d}", step));
      result.last_eval = {{"step", step},
                          {"accuracy", summary.overall.pass1},
                          {"mean_tokens", summary.overall.mean_tokens}};
      metrics.append("eval", result.last_eval);
      out << fmt::format("eval @ step {}: {} accuracy {:.4f} (mean {:.0f} tokens)\n", step,
                         o.eval_benchmark, summary.overall.pass1, summary.overall.mean_tokens);
    }
    comm->barrier();
  };
  if (result.start_step == 0) evaluate(0);
  const auto run_state = [&] { return io::Json{{"data_position", sampler.position().to_json()}}; };

  const int64_t per_rank = o.prompts_per_step / comm->world_size();
  const auto run_start = Clock::now();
  int64_t step = result.start_step;
  for (; step < o.trainer.steps; ++step) {
    if (run.stop_requested()) break;
    const auto step_start = Clock::now();
    const std::vector<int64_t> indices = sampler.next_step();
    // --- Rollouts of this rank's prompts, G each, seeded by (seed, step, prompt index).
    generation::SamplingParams params;
    params.temperature = o.temperature;
    params.top_p = o.top_p;
    params.top_k = o.top_k;
    params.max_new_tokens = o.max_new_tokens;
    params.stop_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
    std::vector<generation::GenerationRequest> requests;
    for (int64_t i = 0; i < per_rank; ++i) {
      const int64_t index = indices[static_cast<size_t>(comm->rank() * per_rank + i)];
      generation::GenerationRequest r;
      r.prompt_ids = prompts[static_cast<size_t>(index)].ids;
      r.num_samples = o.group_size;
      r.seed = mix(mix(o.trainer.seed, static_cast<uint64_t>(step)), static_cast<uint64_t>(index));
      r.params = params;
      requests.push_back(std::move(r));
    }
    policy.model->eval();
    generation::GenerationEngine engine(*policy.model, tokenizer, o.rollout);
    const auto rollouts = engine.generate(requests);
    policy.model->train();
    const double rollout_seconds = seconds_since(step_start);

    // --- Rewards and group-relative advantages.
    const auto train_start = Clock::now();
    std::vector<Sample> samples;
    std::vector<RewardInput> inputs;
    for (const auto& r : rollouts) {
      const int64_t index = indices[static_cast<size_t>(comm->rank() * per_rank) + r.request_index];
      Sample s;
      s.prompt = static_cast<size_t>(index);
      s.completion = r.token_ids;
      s.rollout_logp = r.tempered_logprobs;
      s.truncated = r.finish_reason == generation::FinishReason::kLength;
      samples.push_back(std::move(s));
      const auto& p = prompts[static_cast<size_t>(index)];
      inputs.push_back({r.text, p.gold, p.problem, samples.back().truncated});
    }
    const auto scores = score_batch(*reward, inputs, 0);
    std::vector<double> rewards;
    for (size_t i = 0; i < samples.size(); ++i) {
      samples[i].reward = scores[i].total;
      for (const auto& part : scores[i].parts)
        if (part.name == "math" || part.name == "math_boxed") samples[i].accuracy = part.value;
      rewards.push_back(scores[i].total);
    }
    const Advantages adv = group_advantages(rewards, o.group_size, o.advantage);
    std::vector<size_t> rows;  // samples that train
    for (size_t i = 0; i < samples.size(); ++i) {
      samples[i].advantage = adv.values[i];
      const bool degenerate = adv.degenerate_group[i / static_cast<size_t>(o.group_size)] != 0;
      const bool masked = o.mask_truncated && samples[i].truncated;
      if (samples[i].completion.empty() || masked || (o.skip_degenerate_groups && degenerate))
        continue;
      rows.push_back(i);
    }

    // --- Minibatches (the same layout on every pass; the order is drawn per epoch).
    const int64_t micro = o.micro_batch_size;
    auto forward_rows = [&](std::span<const size_t> chunk, model::CausalLM& m, bool entropy) {
      std::vector<PolicySequence> seqs;
      for (size_t i : chunk) {
        const auto& s = samples[i];
        seqs.push_back({prompts[s.prompt].ids, s.completion});
      }
      PolicyBatch batch = make_policy_batch(seqs, pad_id, device);
      PolicyLogprobs lp = policy_logprobs(m, batch, o.temperature, entropy);
      return std::make_pair(std::move(batch), std::move(lp));
    };
    auto micro_chunks = [&](const std::vector<size_t>& minibatch) {
      std::vector<std::span<const size_t>> chunks;
      const size_t size =
          micro > 0 ? static_cast<size_t>(micro) : std::max<size_t>(1, minibatch.size());
      for (size_t b = 0; b < minibatch.size(); b += size)
        chunks.emplace_back(minibatch.data() + b, std::min(size, minibatch.size() - b));
      return chunks;
    };
    auto split_minibatches = [&](std::vector<size_t> order) {
      std::vector<std::vector<size_t>> out(static_cast<size_t>(o.minibatches));
      for (size_t k = 0; k < order.size(); ++k)
        out[k * out.size() / std::max<size_t>(1, order.size())].push_back(order[k]);
      return out;
    };
    const bool old_is_current = o.epochs == 1 && o.minibatches == 1;
    {
      // The log-probs before any update of this step (old policy) and of the reference, in the
      // layout of the first pass, so the first update sees a ratio of exactly 1.
      torch::NoGradGuard no_grad;
      for (const auto& minibatch : split_minibatches(rows))
        for (auto chunk : micro_chunks(minibatch)) {
          if (!old_is_current) {
            auto [batch, lp] = forward_rows(chunk, *policy.model, false);
            for (size_t j = 0; j < chunk.size(); ++j)
              samples[chunk[j]].old_logp =
                  row_values(lp.logp, batch.completion_mask, static_cast<int64_t>(j));
          }
          if (reference) {
            auto [batch, lp] = forward_rows(chunk, *reference, false);
            for (size_t j = 0; j < chunk.size(); ++j)
              samples[chunk[j]].ref_logp =
                  row_values(lp.logp, batch.completion_mask, static_cast<int64_t>(j));
          }
        }
    }
    double loss_sum = 0, clip_sum = 0, kl_sum = 0, ratio_sum = 0, stat_tokens = 0, grad_norm = 0;
    double entropy_sum = 0, entropy_tokens = 0;
    int64_t updates = 0;
    std::vector<size_t> order = rows;
    for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
      if (epoch > 0) {
        std::mt19937_64 rng(mix(mix(o.trainer.seed, static_cast<uint64_t>(step)),
                                1000 + static_cast<uint64_t>(epoch)));
        for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
      }
      for (const auto& minibatch : split_minibatches(order)) {
        // Weights make micro-batches and ranks add up to the minibatch's aggregation.
        int64_t local_tokens = 0;
        for (size_t i : minibatch)
          local_tokens += static_cast<int64_t>(samples[i].completion.size());
        const int64_t global_rows = comm->all_reduce_sum(static_cast<int64_t>(minibatch.size()));
        const int64_t global_tokens = comm->all_reduce_sum(local_tokens);
        const int64_t update = step * o.epochs * o.minibatches + updates;
        optimizer.set_lr(schedule.at(update));
        double local_loss = 0;
        for (auto chunk : micro_chunks(minibatch)) {
          if (chunk.empty()) continue;
          auto [batch, lp] = forward_rows(chunk, *policy.model, epoch == 0);
          std::vector<std::span<const float>> old_rows, ref_rows, rollout_rows;
          std::vector<double> advantages;
          for (size_t i : chunk) {
            old_rows.emplace_back(samples[i].old_logp);
            ref_rows.emplace_back(samples[i].ref_logp);
            rollout_rows.emplace_back(samples[i].rollout_logp);
            advantages.push_back(samples[i].advantage);
          }
          const at::Tensor old_logp =
              old_is_current ? lp.logp.detach() : align_completion_values(batch, old_rows);
          const at::Tensor ref_logp =
              reference ? align_completion_values(batch, ref_rows) : at::Tensor();
          const at::Tensor rollout_logp = loss_options.tis_cap > 0
                                              ? align_completion_values(batch, rollout_rows)
                                              : at::Tensor();
          const GrpoLoss l =
              grpo_loss(lp.logp, old_logp, batch.completion_mask,
                        torch::tensor(advantages, at::kDouble).to(at::kFloat).to(device),
                        loss_options, ref_logp, rollout_logp);
          const double weight =
              loss_options.aggregation == LossAggregation::kTokenMean
                  ? static_cast<double>(batch.completion_tokens) /
                        std::max<int64_t>(1, global_tokens)
                  : static_cast<double>(chunk.size()) / std::max<int64_t>(1, global_rows);
          (l.loss * weight).backward();
          local_loss += l.loss.item<double>() * weight;
          clip_sum += l.clip_fraction * l.tokens;
          kl_sum += l.kl * l.tokens;
          ratio_sum += l.mean_ratio * l.tokens;
          stat_tokens += l.tokens;
          if (epoch == 0) {
            entropy_sum += lp.entropy.sum().item<double>();
            entropy_tokens += static_cast<double>(batch.completion_tokens);
          }
        }
        ++updates;
        if (global_rows == 0) continue;  // every group degenerate: nothing to learn from
        comm->all_reduce_gradients(optimizer.tensors());
        const double loss = comm->all_reduce_sum(local_loss);
        run.check_finite(step + 1, "loss", loss);
        grad_norm = optimizer.clip_grad_norm(o.trainer.max_grad_norm);
        run.check_finite(step + 1, "gradient norm", grad_norm);
        optimizer.step();
        optimizer.zero_grad();
        loss_sum += loss;
      }
    }
    const double train_seconds = seconds_since(train_start);

    // --- Metrics over all ranks.
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
    const double n = comm->all_reduce_sum(static_cast<double>(samples.size()));
    const double mean_reward = comm->all_reduce_sum(reward_sum) / n;
    const double mean_adv =
        std::accumulate(advs.begin(), advs.end(), 0.0) / std::max<size_t>(1, advs.size());
    double adv_abs_max = 0;
    for (double a : advs) adv_abs_max = std::max(adv_abs_max, std::abs(a));
    const double tokens = std::max(1.0, comm->all_reduce_sum(stat_tokens));
    io::Json row = {
        {"step", step + 1},
        {"reward", mean_reward},
        {"accuracy", comm->all_reduce_sum(acc_sum) / n},
        {"response_length", comm->all_reduce_sum(lengths) / n},
        {"response_length_max", max_length},
        {"truncated_share", comm->all_reduce_sum(truncated) / n},
        {"entropy",
         comm->all_reduce_sum(entropy_sum) / std::max(1.0, comm->all_reduce_sum(entropy_tokens))},
        {"kl", comm->all_reduce_sum(kl_sum) / tokens},
        {"clip_fraction", comm->all_reduce_sum(clip_sum) / tokens},
        {"ratio", comm->all_reduce_sum(ratio_sum) / tokens},
        {"advantage_mean", mean_adv},
        {"advantage_abs_max", adv_abs_max},
        {"degenerate_groups", comm->all_reduce_sum(adv.degenerate_groups)},
        {"trained_samples", comm->all_reduce_sum(static_cast<int64_t>(rows.size()))},
        {"loss", loss_sum / static_cast<double>(std::max<int64_t>(1, updates))},
        {"lr", schedule.at(std::max<int64_t>(0, step * o.epochs * o.minibatches + updates - 1))},
        {"grad_norm", grad_norm},
        {"rollout_seconds", rollout_seconds},
        {"train_seconds", train_seconds}};
    metrics.append("train", row);
    result.mean_rewards.push_back(mean_reward);
    const int64_t done = step + 1;
    if (comm->is_main() &&
        (done % std::max<int64_t>(1, o.trainer.log_every) == 0 || done == o.trainer.steps)) {
      const double elapsed = seconds_since(run_start);
      const double eta = elapsed / static_cast<double>(done - result.start_step) *
                         static_cast<double>(o.trainer.steps - done);
      out << fmt::format(
                 "step {}/{} | reward {:.3f} | acc {:.3f} | len {:.1f} | entropy {:.3f} | kl "
                 "{:.4f} | "
                 "clip {:.3f} | skipped groups {} | lr {:.2e} | grad {:.3f} | rollout {:.1f}s "
                 "train {:.1f}s | ETA {:.0f}s\n",
                 done, o.trainer.steps, mean_reward, row["accuracy"].get<double>(),
                 row["response_length"].get<double>(), row["entropy"].get<double>(),
                 row["kl"].get<double>(), row["clip_fraction"].get<double>(),
                 row["degenerate_groups"].get<int64_t>(), row["lr"].get<double>(), grad_norm,
                 rollout_seconds, train_seconds, eta)
          << std::flush;
    }
    const bool last = done == o.trainer.steps;
    if (o.trainer.eval_every > 0 && done % o.trainer.eval_every == 0 && !last) evaluate(done);
    if (o.trainer.checkpoint_every > 0 && done % o.trainer.checkpoint_every == 0 && !last)
      run.checkpoint(done, run_state());
  }
  result.steps_done = step;
  if (step < o.trainer.steps) {
    const int signal = run.stop_for_signal(step, o.trainer.steps, run_state(), out);
    result.exit_code = 128 + signal;
    return result;
  }
  if (step > result.start_step) {
    evaluate(step);
    run.checkpoint(step, run_state());
  }
  if (!comm->is_main()) return result;

  // --- The artifact.
  quant::QuantState state;
  if (policy.quantized) state = train::materialize_fake_quant(*policy.model, policy.spec);
  if (!policy.lora_layers.empty()) {
    train::save_lora_adapter(*policy.model, o.lora, o.lora_targets, o.model_dir.string(),
                             o.out_dir / "adapter");
    train::merge_lora(*policy.model);
  }
  model::SaveOptions save;
  save.dtype = at::kFloat;
  save.tokenizer_from = o.model_dir;
  model::save_causal_lm(*policy.model, o.out_dir, save);
  if (policy.quantized) quant::save_quant_state(o.out_dir, state);
  metrics.write_hdf5({{"tool", "grpo"}});
  io::Manifest manifest;
  manifest.tool = "grpo";
  manifest.inputs["model"] = o.model_dir.string();
  manifest.inputs["data"] = o.data.string();
  manifest.config = fingerprint;
  manifest.config.erase("model");
  manifest.config["world_size"] = comm->world_size();
  manifest.metrics = {
      {"steps", step},
      {"final_reward", result.mean_rewards.empty() ? 0.0 : result.mean_rewards.back()}};
  if (!result.last_eval.empty()) manifest.metrics["eval_accuracy"] = result.last_eval["accuracy"];
  io::write_manifest(o.out_dir, manifest);
  out << fmt::format("wrote {}\n", o.out_dir.string());
  return result;
}

}  // namespace rqat::rl
