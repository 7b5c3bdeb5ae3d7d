#include "train/trainer.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ostream>

#include "io/error.h"
#include "train/training_run.h"

namespace rqat::train {

io::Json trainer_fingerprint(const TrainerOptions& t) {
  return {{"steps", t.steps},
          {"batch_size", t.batch_size},
          {"seed", t.seed},
          {"lr", t.lr.peak_lr},
          {"warmup_steps", t.lr.warmup_steps},
          {"schedule", lr_decay_name(t.lr.decay)},
          {"min_lr_ratio", t.lr.min_lr_ratio},
          {"adam_beta1", t.adamw.beta1},
          {"adam_beta2", t.adamw.beta2},
          {"adam_eps", t.adamw.eps},
          {"weight_decay", t.adamw.weight_decay},
          {"max_grad_norm", t.max_grad_norm}};
}
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// bf16 autocast on CUDA for the forward pass only (backward runs in the dtypes autocast chose).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }

 private:
  bool enabled_;
};

TokenBatch to_device(TokenBatch batch, c10::Device device) {
  if (device.is_cpu()) return batch;
  batch.input_ids = batch.input_ids.to(device);
  if (batch.attention_mask.defined()) batch.attention_mask = batch.attention_mask.to(device);
  batch.loss_mask = batch.loss_mask.to(device);
  return batch;
}

}  // namespace

Trainer::Trainer(torch::nn::Module& trained, TrainingOptimizer& optimizer,
                 const SequenceSet& sequences, Communicator& communicator, StepMetricsLog& metrics,
                 TrainerOptions options)
    : trained_(trained),
      optimizer_(optimizer),
      sequences_(sequences),
      comm_(communicator),
      metrics_(metrics),
      options_(std::move(options)) {
  if (options_.steps < 1) fail("--steps must be >= 1, got {}", options_.steps);
  if (options_.batch_size < 1) fail("--batch-size must be >= 1, got {}", options_.batch_size);
  if (options_.batch_size % comm_.world_size() != 0)
    fail("--batch-size {} must be a multiple of the number of processes ({})", options_.batch_size,
         comm_.world_size());
  if (options_.micro_batch_size < 0)
    fail("--micro-batch-size must be >= 0, got {}", options_.micro_batch_size);
  if (options_.log_every < 1) fail("--log-every must be >= 1, got {}", options_.log_every);
  if (options_.eval_every < 0) fail("--eval-every must be >= 0, got {}", options_.eval_every);
  if (options_.checkpoint_every < 0)
    fail("--checkpoint-every must be >= 0, got {}", options_.checkpoint_every);
  if (options_.keep_checkpoints < 1)
    fail("--keep-checkpoints must be >= 1, got {}", options_.keep_checkpoints);
  options_.lr.total_steps = options_.steps;
  options_.lr.validate();
}

io::Json Trainer::run_evaluation(int64_t step, const EvaluateFn& evaluate, std::ostream& log) {
  io::Json row = io::Json::object();
  if (!evaluate) return row;
  if (comm_.is_main()) {
    const auto start = Clock::now();
    row = evaluate(step);
    if (!row.is_object()) row = io::Json::object();
    if (!row.empty()) {
      std::string line = fmt::format("eval @ step {}:", step);
      for (const auto& [key, value] : row.items())
        line += value.is_number_float() ? fmt::format(" {} {:.4f}", key, value.get<double>())
                                        : fmt::format(" {} {}", key, value.dump());
      log << line << fmt::format(" ({:.1f} s)\n", seconds_since(start)) << std::flush;
      io::Json logged = row;
      logged["step"] = step;
      metrics_.append("eval", logged);
    }
  }
  comm_.barrier();
  return row;
}

TrainerResult Trainer::run(const MicroBatchLossFn& loss_fn, const EvaluateFn& evaluate,
                           std::ostream& log) {
  TrainerResult result;
  StepSampler sampler(sequences_, options_.batch_size, options_.seed);
  io::Json counters = {{"target_tokens", 0}, {"tokens", 0}, {"seconds", 0.0}};

  TrainingRun run(trained_, optimizer_, comm_, metrics_, options_.out_dir, options_.fingerprint,
                  options_.keep_checkpoints, options_.tool);
  if (const auto saved = run.start(options_.resume, log)) {
    result.start_step = saved->at("step").get<int64_t>();
    result.last_checkpoint = run.last_checkpoint();
    sampler.restore(DataPosition::from_json(
        saved->at("data_position"), (result.last_checkpoint / "trainer_state.json").string()));
    counters = saved->value("counters", counters);
  }
  // What a checkpoint holds besides the module and optimizer.
  const auto run_state = [&] {
    return io::Json{{"data_position", sampler.position().to_json()}, {"counters", counters}};
  };
  const auto checkpoint = [&](int64_t steps_done) {
    return run.checkpoint(steps_done, run_state());
  };
  if (result.start_step > options_.steps)
    fail("--resume: the checkpoint is at step {}, past --steps {}", result.start_step,
         options_.steps);
  if (result.start_step == 0) result.last_eval = run_evaluation(0, evaluate, log);

  const int world = comm_.world_size();
  const int64_t per_rank = options_.batch_size / world;
  const int64_t micro = options_.micro_batch_size > 0 ? options_.micro_batch_size : per_rank;
  const auto run_start = Clock::now();
  int64_t run_targets = 0, run_tokens = 0;
  int64_t step = result.start_step;
  for (; step < options_.steps; ++step) {
    if (run.stop_requested()) break;
    const auto step_start = Clock::now();
    const double lr = options_.lr.at(step);
    optimizer_.set_lr(lr);
    const std::vector<int64_t> indices = sampler.next_step();
    const int64_t step_targets = count_target_tokens(sequences_, indices);
    const std::span<const int64_t> mine(indices.data() + comm_.rank() * per_rank,
                                        static_cast<size_t>(per_rank));
    double local_loss = 0;
    std::map<std::string, double> local_sums;
    int64_t local_tokens = 0;
    for (int64_t begin = 0; begin < per_rank; begin += micro) {
      const int64_t count = std::min(micro, per_rank - begin);
      TokenBatch batch = to_device(
          collate(sequences_, mine.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                  options_.pad_id),
          options_.device);
      local_tokens += batch.tokens;
      MicroBatchLoss part;
      {
        AutocastScope autocast(options_.autocast_bf16 && options_.device.is_cuda());
        part = loss_fn(batch, static_cast<double>(std::max<int64_t>(step_targets, 1)));
      }
      part.loss.backward();
      local_loss += part.loss.detach().item<double>();
      for (const auto& [key, value] : part.sums) local_sums[key] += value;
    }
    comm_.all_reduce_gradients(optimizer_.tensors());
    const double loss = comm_.all_reduce_sum(local_loss);
    const int64_t tokens = comm_.all_reduce_sum(local_tokens);
    for (auto& [key, value] : local_sums) value = comm_.all_reduce_sum(value);
    run.check_finite(step + 1, "loss", loss);
    const double grad_norm = optimizer_.clip_grad_norm(options_.max_grad_norm);
    run.check_finite(step + 1, "gradient norm", grad_norm);
    optimizer_.step();
    optimizer_.zero_grad();

    run_targets += step_targets;
    run_tokens += tokens;
    counters["target_tokens"] = counters["target_tokens"].get<int64_t>() + step_targets;
    counters["tokens"] = counters["tokens"].get<int64_t>() + tokens;
    const double elapsed = seconds_since(run_start);
    counters["seconds"] = counters["seconds"].get<double>() + seconds_since(step_start);
    result.last_loss = loss;
    const int64_t done = step + 1;
    if (done % options_.log_every == 0 || done == options_.steps) {
      const double tokens_per_second = elapsed > 0 ? run_tokens / elapsed : 0.0;
      const double eta = elapsed / static_cast<double>(done - result.start_step) *
                         static_cast<double>(options_.steps - done);
      io::Json row = {{"step", done},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"target_tokens", step_targets},
                      {"tokens_per_second", tokens_per_second},
                      {"step_seconds", seconds_since(step_start)}};
      std::string extra;
      for (const auto& [key, value] : local_sums) {
        const double mean = value / static_cast<double>(std::max<int64_t>(step_targets, 1));
        row[key] = mean;
        extra += fmt::format(" | {} {:.4f}", key, mean);
      }
      metrics_.append("train", row);
      if (options_.show_progress && comm_.is_main())
        log << fmt::format(
                   "step {}/{} | loss {:.4f}{} | lr {:.2e} | grad {:.3f} | {:.0f} tok/s | "
                   "ETA {}\n",
                   done, options_.steps, loss, extra, lr, grad_norm, tokens_per_second,
                   format_duration(eta))
            << std::flush;
    }
    const bool last = done == options_.steps;
    if (options_.eval_every > 0 && done % options_.eval_every == 0 && !last)
      result.last_eval = run_evaluation(done, evaluate, log);
    if (options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0 && !last)
      result.last_checkpoint = checkpoint(done);
  }
  result.steps_done = step;
  const double elapsed = seconds_since(run_start);
  result.tokens_per_second = elapsed > 0 ? run_tokens / elapsed : 0.0;
  result.target_tokens = run_targets;
  if (step < options_.steps) {
    result.stopped_by_signal = run.stop_for_signal(step, options_.steps, run_state(), log);
    result.last_checkpoint = run.last_checkpoint();
    return result;
  }
  if (step > result.start_step || result.start_step == options_.steps) {
    result.last_eval = run_evaluation(step, evaluate, log);
  }
  if (step > result.start_step) result.last_checkpoint = checkpoint(step);
  return result;
}

}  // namespace rqat::train
