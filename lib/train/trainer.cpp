#include "train/trainer.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <ostream>

#include "io/error.h"
#include "train/training_run.h"

namespace rqat::train {

io::Json trainer_fingerprint(const TrainerOptions& options) { return io::settings_json(options); }
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
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

data::TokenBatch to_device(data::TokenBatch batch, c10::Device device) {
  if (device.is_cpu()) return batch;
  batch.input_ids = batch.input_ids.to(device);
  if (batch.attention_mask.defined()) batch.attention_mask = batch.attention_mask.to(device);
  batch.loss_mask = batch.loss_mask.to(device);
  return batch;
}

}  // namespace

OptimizerUpdates::OptimizerUpdates(TrainingOptimizer& optimizer, Communicator& comm,
                                   const LrSchedule& schedule, const TrainerOptions& options,
                                   TrainingRun& run, int64_t step, torch::nn::Module& trained,
                                   std::optional<StateBytes>& state_bytes)
    : optimizer_(optimizer),
      comm_(comm),
      schedule_(schedule),
      options_(options),
      run_(run),
      step_(step),
      trained_(trained),
      state_bytes_(state_bytes) {}

double OptimizerUpdates::next_lr() {
  if (done_ >= options_.updates_per_step)
    fail("step {}: more than the {} optimizer updates per step the schedule has", step_ + 1,
         options_.updates_per_step);
  last_lr_ = schedule_.at(step_ * options_.updates_per_step + done_++);
  return last_lr_;
}

OptimizerUpdates::Applied OptimizerUpdates::apply(double local_loss) {
  optimizer_.set_lr(next_lr());
  const bool measure = !state_bytes_.has_value();
  StateBytes before;
  if (measure) before = optimizer_.state_bytes(trained_);
  optimizer_.reduce_gradients(comm_);
  Applied applied;
  applied.loss = comm_.all_reduce_sum(local_loss);
  run_.check_finite(step_ + 1, "loss", applied.loss);
  applied.grad_norm = optimizer_.clip_grad_norm(options_.max_grad_norm);
  run_.check_finite(step_ + 1, "gradient norm", applied.grad_norm);
  optimizer_.step();
  if (measure) {
    // Weights and gradients at their peak (before the reduction frees full gradients), the
    // optimizer's state once it exists (the optimizer makes its moments at the first step).
    const StateBytes after = optimizer_.state_bytes(trained_);
    StateBytes peak = after;
    peak.weights = std::max(before.weights, after.weights);
    peak.gradients = std::max(before.gradients, after.gradients);
    state_bytes_ = peak;
  }
  optimizer_.zero_grad();
  last_grad_norm_ = applied.grad_norm;
  return applied;
}

void OptimizerUpdates::skip() { next_lr(); }

Trainer::Trainer(torch::nn::Module& trained, TrainingOptimizer& optimizer,
                 const data::SequenceSet& sequences, Communicator& communicator,
                 StepMetricsLog& metrics, TrainerOptions options)
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
  if (options_.updates_per_step < 1)
    fail("updates per step must be >= 1, got {}", options_.updates_per_step);
  if (options_.log_every < 1) fail("--log-every must be >= 1, got {}", options_.log_every);
  if (options_.eval_every < 0) fail("--eval-every must be >= 0, got {}", options_.eval_every);
  if (options_.checkpoint_every < 0)
    fail("--checkpoint-every must be >= 0, got {}", options_.checkpoint_every);
  if (options_.keep_checkpoints < 1)
    fail("--keep-checkpoints must be >= 1, got {}", options_.keep_checkpoints);
  schedule_ = options_.lr;
  schedule_.total_steps = options_.steps * options_.updates_per_step;
  schedule_.validate();
}

io::Json Trainer::run_evaluation(int64_t step, const EvaluateFn& evaluate, std::ostream& log) {
  io::Json row = io::Json::object();
  if (!evaluate) return row;
  WholeModels whole(optimizer_);  // sharded models are evaluated whole, on the main process
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
      if (progress_) {
        io::Json latest = io::Json::object();
        for (const auto& [key, value] : row.items())
          if (value.is_number()) latest["eval_" + key] = value;
        progress_->update(step, latest, /*force=*/true);
      }
    }
  }
  comm_.barrier();
  return row;
}

StepOutcome Trainer::supervised_step(TrainStep& step, const MicroBatchLossFn& loss_fn) {
  const int64_t per_rank = options_.batch_size / comm_.world_size();
  const int64_t micro = options_.micro_batch_size > 0 ? options_.micro_batch_size : per_rank;
  const int64_t step_targets = data::count_target_tokens(sequences_, step.batch);
  const auto mine = step.batch.subspan(static_cast<size_t>(comm_.rank() * per_rank),
                                       static_cast<size_t>(per_rank));
  double local_loss = 0;
  std::map<std::string, double> sums;
  int64_t local_tokens = 0;
  for (int64_t begin = 0; begin < per_rank; begin += micro) {
    const int64_t count = std::min(micro, per_rank - begin);
    data::TokenBatch batch = to_device(
        data::collate(sequences_,
                      mine.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
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
    for (const auto& [key, value] : part.sums) sums[key] += value;
  }
  StepOutcome outcome;
  outcome.loss = step.updates.apply(local_loss).loss;
  outcome.tokens = comm_.all_reduce_sum(local_tokens);
  outcome.target_tokens = step_targets;
  for (auto& [key, value] : sums) {
    const double mean =
        comm_.all_reduce_sum(value) / static_cast<double>(std::max<int64_t>(step_targets, 1));
    outcome.metrics[key] = mean;
    outcome.progress += fmt::format(" | {} {:.4f}", key, mean);
  }
  return outcome;
}

TrainerResult Trainer::run(const MicroBatchLossFn& loss_fn, const EvaluateFn& evaluate,
                           std::ostream& log) {
  if (options_.updates_per_step != 1) fail("supervised steps make one optimizer update each");
  return run([&](TrainStep& step) { return supervised_step(step, loss_fn); }, evaluate, log);
}

void Trainer::report_step(int64_t done, const StepOutcome& outcome, const OptimizerUpdates& updates,
                          double step_seconds, bool progress_line, std::ostream& log) {
  const double elapsed = seconds_since(run_start_);
  const double tokens_per_second = elapsed > 0 ? run_tokens_ / elapsed : 0.0;
  const double eta = elapsed / static_cast<double>(done - start_step_) *
                     static_cast<double>(options_.steps - done);
  io::Json row = outcome.metrics;
  row["step"] = done;
  row["loss"] = outcome.loss;
  row["lr"] = updates.last_lr();
  row["grad_norm"] = updates.last_grad_norm();
  row["target_tokens"] = outcome.target_tokens;
  row["tokens_per_second"] = tokens_per_second;
  row["step_seconds"] = step_seconds;
  if (progress_) progress_->update(done, row);
  metrics_.append("train", row);
  if (progress_line && !outcome.text.empty()) metrics_.add_text("samples", outcome.text, done);
  if (progress_line && options_.show_progress && comm_.is_main())
    log << fmt::format(
               "step {}/{} | loss {:.4f}{} | lr {:.2e} | grad {:.3f} | {:.0f} tok/s | ETA {}\n",
               done, options_.steps, outcome.loss, outcome.progress, updates.last_lr(),
               updates.last_grad_norm(), tokens_per_second, io::format_duration(eta))
        << std::flush;
}

TrainerResult Trainer::run(const StepFn& step_fn, const EvaluateFn& evaluate, std::ostream& log) {
  TrainerResult result;
  data::StepSampler sampler(sequences_, options_.batch_size, options_.seed);
  io::Json counters = {{"target_tokens", 0}, {"tokens", 0}, {"seconds", 0.0}};

  TrainingRun run(trained_, optimizer_, comm_, metrics_, options_.out_dir, options_.fingerprint,
                  options_.keep_checkpoints, options_.tool);
  if (const auto saved = run.start(options_.resume, log)) {
    result.start_step = saved->at("step").get<int64_t>();
    result.last_checkpoint = run.last_checkpoint();
    sampler.restore(data::DataPosition::from_json(
        saved->at("data_position"), (result.last_checkpoint / "trainer_state.json").string()));
    counters = saved->value("counters", counters);
  }
  if (!options_.no_tensorboard && comm_.is_main()) {
    metrics_.write_tensorboard(options_.out_dir / "tb");
    // The settings a resumed run must share with its checkpoint: what makes this run this run.
    metrics_.add_text("settings", "```\n" + options_.fingerprint.dump(2) + "\n```",
                      result.start_step);
  }
  // What a checkpoint holds besides the module and optimizer.
  const auto run_state = [&] {
    return io::Json{{"data_position", sampler.position().to_json()}, {"counters", counters}};
  };
  if (result.start_step > options_.steps)
    fail("--resume: the checkpoint is at step {}, past --steps {}", result.start_step,
         options_.steps);
  if (comm_.is_main())
    progress_ = std::make_unique<io::ProgressFile>(options_.out_dir, options_.tool, "steps",
                                                   options_.steps, result.start_step);
  if (result.start_step == 0) result.last_eval = run_evaluation(0, evaluate, log);

  run_start_ = Clock::now();
  start_step_ = result.start_step;
  run_tokens_ = 0;
  int64_t run_targets = 0;
  int64_t step = result.start_step;
  for (; step < options_.steps; ++step) {
    if (run.stop_requested()) break;
    const auto step_start = Clock::now();
    const std::vector<int64_t> indices = sampler.next_step();
    OptimizerUpdates updates(optimizer_, comm_, schedule_, options_, run, step, trained_,
                             state_bytes_);
    TrainStep train_step{step, indices, updates};
    const bool first_update = !state_bytes_.has_value();
    const StepOutcome outcome = step_fn(train_step);
    if (first_update && state_bytes_ && comm_.is_main())
      log << fmt::format("memory per process ({} of {}, --shard {}): {}\n", comm_.rank(),
                         comm_.world_size(), enum_name(options_.shard),
                         format_state_bytes(*state_bytes_))
          << std::flush;

    run_targets += outcome.target_tokens;
    run_tokens_ += outcome.tokens;
    counters["target_tokens"] = counters["target_tokens"].get<int64_t>() + outcome.target_tokens;
    counters["tokens"] = counters["tokens"].get<int64_t>() + outcome.tokens;
    counters["seconds"] = counters["seconds"].get<double>() + seconds_since(step_start);
    result.last_loss = outcome.loss;
    const int64_t done = step + 1;
    const bool last = done == options_.steps;
    report_step(done, outcome, updates, seconds_since(step_start),
                done % options_.log_every == 0 || last, log);
    if (options_.eval_every > 0 && done % options_.eval_every == 0 && !last)
      result.last_eval = run_evaluation(done, evaluate, log);
    if (options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0 && !last)
      result.last_checkpoint = run.checkpoint(done, run_state());
  }
  result.steps_done = step;
  const double elapsed = seconds_since(run_start_);
  result.tokens_per_second = elapsed > 0 ? run_tokens_ / elapsed : 0.0;
  result.target_tokens = run_targets;
  if (state_bytes_) result.state_bytes = *state_bytes_;
  if (step < options_.steps) {
    result.stopped_by_signal = run.stop_for_signal(step, options_.steps, run_state(), log);
    result.last_checkpoint = run.last_checkpoint();
    if (progress_) progress_->finish("stopped");
    return result;
  }
  if (step > result.start_step || result.start_step == options_.steps)
    result.last_eval = run_evaluation(step, evaluate, log);
  if (step > result.start_step) result.last_checkpoint = run.checkpoint(step, run_state());
  // Training is over; the tool writes its outputs next (a failure there still marks it failed).
  if (progress_) progress_->finish("done");
  optimizer_.unshard();  // the tools write the artifact from full fp32 weights
  return result;
}

}  // namespace rqat::train
