// The one training loop of qat-sft, qat-kd and grpo: deterministic steps over a SequenceSet, data
// parallelism, clipping, AdamW with a schedule, periodic evaluation, metrics, progress,
// checkpoints, resume, signals and the NaN guard. A trainer supplies what one step does (a StepFn,
// in the manner of torchtitan's train_step): qat-sft and qat-kd the loss of a micro-batch
// (MicroBatchLossFn, below), grpo rollouts, rewards and policy updates (rl/grpo_step.h).
//
// Supervised steps (run with a MicroBatchLossFn): one optimizer step takes `batch_size` sequences
// (the global batch) from the StepSampler. Rank r of W processes takes the r-th of W equal slices,
// and cuts it into micro-batches of at most `micro_batch_size` sequences; every micro-batch's loss
// is a SUM over its target tokens divided by the target tokens of the whole global batch, and
// gradients are summed over micro-batches and ranks. So the step's gradient is that of the mean
// loss per target token of the global batch, whatever the number of processes and micro-batches: 1
// process x batch 8 and 2 processes x 4 compute the same numbers up to float summation order.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "data/training_batches.h"
#include "io/json_file.h"
#include "io/options.h"
#include "io/progress_file.h"
#include "train/distributed.h"
#include "train/lr_schedule.h"
#include "train/shard_mode.h"
#include "train/state_bytes.h"
#include "train/step_metrics_log.h"
#include "train/training_optimizer.h"

namespace rqat::train {

class TrainingRun;

struct TrainerOptions {
  std::filesystem::path out_dir;  // checkpoints/, metrics.jsonl, metrics.h5
  int64_t steps = 100;            // steps (supervised: optimizer steps)
  int64_t updates_per_step = 1;   // optimizer updates per step (the lr is scheduled over updates)
  int64_t batch_size = 8;         // sequences per optimizer step, over all processes
  int64_t micro_batch_size = 0;   // sequences per forward/backward on one process (0: all of them)
  uint64_t seed = 0;              // data order
  LrSchedule lr;
  AdamWSettings adamw;
  double max_grad_norm = 1.0;    // <= 0: no clipping
  int64_t log_every = 1;         // progress line every N steps (a "train" metrics row every step)
  int64_t eval_every = 0;        // evaluation every N steps (and at 0 and the end); 0: only 0/end
  int64_t checkpoint_every = 0;  // 0: only on a signal and at the end
  int keep_checkpoints = 2;
  bool resume = false;  // continue from out_dir's latest checkpoint when there is one
  // TensorBoard event files in out_dir/tb (the metrics rows, the settings, GRPO's samples), unless
  // switched off.
  bool no_tensorboard = false;
  // How ranks split the state (train/shard_mode.h). A run control: a checkpoint resumes under
  // any mode and world size.
  ShardMode shard = ShardMode::kNone;
  int64_t pad_id = 0;
  c10::Device device = c10::kCPU;
  bool autocast_bf16 = false;  // CUDA: forward under bf16 autocast (master weights stay float32)
  // The configuration that must not change between a checkpoint and its resumption (model,
  // data, objective, quantization, schedule...). A resume with another one is refused, naming
  // the first key that differs.
  io::Json fingerprint = io::Json::object();
  bool show_progress = true;
  std::string tool = "train";  // recorded in metrics.h5

  // The options a user sets, each once (io/options.h): the tools' flags, the resume fingerprint
  // and the manifests derive from this list. The others are filled by the tool.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.steps, "steps", "Steps (qat: optimizer steps; grpo: rollout batches)");
    v.value(self.batch_size, "batch-size", "Sequences per optimizer step (all processes)");
    v.value(self.micro_batch_size, "micro-batch-size",
            "Sequences per forward/backward on one process (0: all; accumulates the rest)",
            Role::kRunControl);
    v.value(self.seed, "seed", "Data order (and sampling) seed");
    v.value(self.lr.peak_lr, "lr", "Peak learning rate");
    v.value(self.lr.warmup_steps, "warmup-steps", "Linear warmup (optimizer updates)");
    v.value(self.lr.warmup_from_zero, "warmup-from-zero",
            "Warmup as Hugging Face/TRL: the first update at learning rate 0");
    v.value(self.lr.decay, "schedule", "constant, linear or cosine decay after the warmup");
    v.value(self.lr.min_lr_ratio, "min-lr-ratio", "Final learning rate / peak");
    v.value(self.adamw.weight_decay, "weight-decay", "AdamW decay (weight matrices only)");
    v.value(self.adamw.beta1, "adam-beta1", "AdamW beta1");
    v.value(self.adamw.beta2, "adam-beta2", "AdamW beta2");
    v.value(self.adamw.eps, "adam-eps", "AdamW epsilon");
    v.value(self.max_grad_norm, "max-grad-norm", "Gradient clipping (<= 0: none)");
    v.value(self.log_every, "log-every", "Progress line every N steps", Role::kRunControl);
    v.value(self.no_tensorboard, "no-tensorboard",
            "Write no TensorBoard event files (default: OUT/tb, live)", Role::kRunControl);
    v.value(self.eval_every, "eval-every", "Evaluate every N steps (0: at start and end)",
            Role::kRunControl);
    v.value(self.checkpoint_every, "checkpoint-every",
            "Checkpoint every N steps (0: only at the end and on SIGTERM/SIGINT/SIGUSR1)",
            Role::kRunControl);
    v.value(self.keep_checkpoints, "keep-checkpoints", "Checkpoints kept", Role::kRunControl);
    v.value(self.resume, "resume", "Continue from OUT's latest checkpoint when there is one",
            Role::kRunControl);
    v.value(self.shard, "shard",
            "Split training state over processes: none, optimizer (ZeRO-1), gradients (ZeRO-2), "
            "parameters (ZeRO-3/FSDP full sharding; implies activation checkpointing)",
            Role::kRunControl);
  }
};

// The settings of TrainerOptions::for_each a resumed run must share with its checkpoint (steps,
// batch, seed, schedule, AdamW, clipping), for every trainer's resume fingerprint and manifest.
io::Json trainer_fingerprint(const TrainerOptions& options);

// A micro-batch's contribution to the step (see the header comment): `loss` keeps the graph and
// is already divided by the global batch's target tokens; `sums` are other per-token quantities
// summed over this micro-batch's targets (e.g. "ce", "kd"), reported divided the same way.
struct MicroBatchLoss {
  at::Tensor loss;
  std::map<std::string, double> sums;
};
using MicroBatchLossFn =
    std::function<MicroBatchLoss(const data::TokenBatch& batch, double step_target_tokens)>;
// Evaluation after `step` optimizer steps, on the main process; returns metrics to log (an
// object, may be empty). Other processes wait.
using EvaluateFn = std::function<io::Json(int64_t step)>;

// The optimizer updates of one step. A step calls apply() once its backward passes have summed
// this process's gradients of an update: gradients are all-reduced over processes, the loss and
// gradient norm checked for NaN/Inf (the run stops naming the step), the norm clipped, and AdamW
// steps at the scheduled lr. skip() passes an update that has nothing to learn from (its lr slot
// goes by, so the schedule does not depend on the data).
class OptimizerUpdates {
 public:
  struct Applied {
    double loss = 0;  // the global loss: local losses summed over processes
    double grad_norm = 0;
  };
  Applied apply(double local_loss);
  void skip();
  double last_lr() const { return last_lr_; }
  double last_grad_norm() const { return last_grad_norm_; }
  TrainingOptimizer& optimizer() { return optimizer_; }

 private:
  friend class Trainer;
  OptimizerUpdates(TrainingOptimizer& optimizer, Communicator& comm, const LrSchedule& schedule,
                   const TrainerOptions& options, TrainingRun& run, int64_t step,
                   torch::nn::Module& trained, std::optional<StateBytes>& state_bytes);
  double next_lr();

  TrainingOptimizer& optimizer_;
  Communicator& comm_;
  const LrSchedule& schedule_;
  const TrainerOptions& options_;
  TrainingRun& run_;
  int64_t step_;
  torch::nn::Module& trained_;
  std::optional<StateBytes>& state_bytes_;  // filled by the run's first update
  int64_t done_ = 0;  // updates applied or skipped in this step
  double last_lr_ = 0, last_grad_norm_ = 0;
};

// Every sharded model whole while this lives (rollouts, evaluation: code that runs the models
// outside the training forward). Communicates on construction and destruction; nothing happens
// unsharded.
class WholeModels {
 public:
  // frozen_too: also the sharded frozen models (teacher, reference).
  explicit WholeModels(TrainingOptimizer& optimizer, bool frozen_too = true)
      : optimizer_(optimizer) {
    optimizer_.gather_all(frozen_too);
  }
  ~WholeModels() { optimizer_.release_all(); }
  WholeModels(const WholeModels&) = delete;
  WholeModels& operator=(const WholeModels&) = delete;

 private:
  TrainingOptimizer& optimizer_;
};

// What one step gets: its index (0-based), the global batch the StepSampler drew for it
// (sequence indices, the same on every process; rank r of W works on the r-th of W slices) and
// its optimizer updates.
struct TrainStep {
  int64_t index = 0;
  std::span<const int64_t> batch;
  OptimizerUpdates& updates;
};
// What a step reports for its metrics row and progress line. Token counts are global.
struct StepOutcome {
  double loss = 0;
  int64_t target_tokens = 0;              // tokens the loss was taken over
  int64_t tokens = 0;                     // tokens processed (for tokens/s)
  io::Json metrics = io::Json::object();  // further columns of the "train" row
  std::string progress;                   // further " | name value" fields of the progress line
  // A markdown summary of the step (GRPO: a few sampled completions with their rewards), written
  // to TensorBoard's text tab at the steps that print a progress line.
  std::string text;
};
using StepFn = std::function<StepOutcome(TrainStep& step)>;

struct TrainerResult {
  int64_t start_step = 0;     // 0, or the checkpoint's step when resumed
  int64_t steps_done = 0;     // optimizer steps completed (== options.steps unless stopped)
  int stopped_by_signal = 0;  // the signal that stopped the run, 0 when it completed
  double last_loss = 0;
  double tokens_per_second = 0;  // target tokens per second of this process's run
  int64_t target_tokens = 0;     // target tokens trained on (global, this process's run)
  io::Json last_eval = io::Json::object();
  std::filesystem::path last_checkpoint;
  // This process's training state at the first update of the run: weights and gradients as
  // the backward passes left them, master weights and moments after the step.
  StateBytes state_bytes;
};

class Trainer {
 public:
  // `trained`: the module whose state is checkpointed (parameters and buffers); `optimizer` holds
  // its trainable parameters. The sequences, communicator and log outlive the trainer.
  Trainer(torch::nn::Module& trained, TrainingOptimizer& optimizer,
          const data::SequenceSet& sequences, Communicator& communicator, StepMetricsLog& metrics,
          TrainerOptions options);

  TrainerResult run(const StepFn& step_fn, const EvaluateFn& evaluate, std::ostream& log);
  // Supervised steps: micro-batches of the step's sequences, one update (see the header comment).
  TrainerResult run(const MicroBatchLossFn& loss_fn, const EvaluateFn& evaluate, std::ostream& log);

 private:
  io::Json run_evaluation(int64_t step, const EvaluateFn& evaluate, std::ostream& log);
  StepOutcome supervised_step(TrainStep& step, const MicroBatchLossFn& loss_fn);
  // Appends the step's "train" metrics row; prints the progress line when progress_line.
  void report_step(int64_t done, const StepOutcome& outcome, const OptimizerUpdates& updates,
                   double step_seconds, bool progress_line, std::ostream& log);

  friend class OptimizerUpdates;
  torch::nn::Module& trained_;
  TrainingOptimizer& optimizer_;
  const data::SequenceSet& sequences_;
  Communicator& comm_;
  StepMetricsLog& metrics_;
  TrainerOptions options_;
  LrSchedule schedule_;  // over steps x updates_per_step updates
  // Progress of this process's run (from the start or the resumed step).
  std::chrono::steady_clock::time_point run_start_;
  int64_t start_step_ = 0, run_tokens_ = 0;
  std::optional<StateBytes> state_bytes_;  // measured by the run's first update
  // OUT/progress.json on the main process (io/progress_file.h), for `rqat status`.
  std::unique_ptr<io::ProgressFile> progress_;
};

}  // namespace rqat::train
