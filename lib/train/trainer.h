// The training loop shared by qat-sft, qat-kd (and the optimizer side of grpo): deterministic
// steps over a SequenceSet, gradient accumulation, data parallelism, clipping, AdamW with a
// schedule, periodic evaluation, metrics, progress, checkpoints, resume, signals and the NaN guard.
//
// One optimizer step takes `batch_size` sequences (the global batch) from the StepSampler. Rank r
// of W processes takes the r-th of W equal slices, and cuts it into micro-batches of at most
// `micro_batch_size` sequences; every micro-batch's loss is a SUM over its target tokens divided
// by the target tokens of the whole global batch, and gradients are summed over micro-batches and
// ranks. So the step's gradient is that of the mean loss per target token of the global batch,
// whatever the number of processes and micro-batches: 1 process x batch 8 and 2 processes x 4
// compute the same numbers up to float summation order.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>

#include "io/json_file.h"
#include "train/distributed.h"
#include "train/lr_schedule.h"
#include "train/step_metrics_log.h"
#include "train/training_batches.h"
#include "train/training_optimizer.h"

namespace rqat::train {

struct TrainerOptions {
  std::filesystem::path out_dir;  // checkpoints/, metrics.jsonl, metrics.h5
  int64_t steps = 100;            // optimizer steps
  int64_t batch_size = 8;         // sequences per optimizer step, over all processes
  int64_t micro_batch_size = 0;   // sequences per forward/backward on one process (0: all of them)
  uint64_t seed = 0;              // data order
  LrSchedule lr;
  AdamWSettings adamw;
  double max_grad_norm = 1.0;    // <= 0: no clipping
  int64_t log_every = 1;         // progress line and "train" metrics row every N steps
  int64_t eval_every = 0;        // evaluation every N steps (and at 0 and the end); 0: only 0/end
  int64_t checkpoint_every = 0;  // 0: only on a signal and at the end
  int keep_checkpoints = 2;
  bool resume = false;  // continue from out_dir's latest checkpoint when there is one
  int64_t pad_id = 0;
  c10::Device device = c10::kCPU;
  bool autocast_bf16 = false;  // CUDA: forward under bf16 autocast (master weights stay float32)
  // The configuration that must not change between a checkpoint and its resumption (model,
  // data, objective, quantization, schedule...). A resume with another one is refused, naming
  // the first key that differs.
  io::Json fingerprint = io::Json::object();
  bool show_progress = true;
  std::string tool = "train";  // recorded in metrics.h5
};

// The optimization settings a resumed run must share with its checkpoint (steps, batch, seed,
// schedule, AdamW, clipping), for every trainer's resume fingerprint and manifest.
io::Json trainer_fingerprint(const TrainerOptions& options);

// A micro-batch's contribution to the step (see the header comment): `loss` keeps the graph and
// is already divided by the global batch's target tokens; `sums` are other per-token quantities
// summed over this micro-batch's targets (e.g. "ce", "kd"), reported divided the same way.
struct MicroBatchLoss {
  at::Tensor loss;
  std::map<std::string, double> sums;
};
using MicroBatchLossFn =
    std::function<MicroBatchLoss(const TokenBatch& batch, double step_target_tokens)>;
// Evaluation after `step` optimizer steps, on the main process; returns metrics to log (an
// object, may be empty). Other processes wait.
using EvaluateFn = std::function<io::Json(int64_t step)>;

struct TrainerResult {
  int64_t start_step = 0;     // 0, or the checkpoint's step when resumed
  int64_t steps_done = 0;     // optimizer steps completed (== options.steps unless stopped)
  int stopped_by_signal = 0;  // the signal that stopped the run, 0 when it completed
  double last_loss = 0;
  double tokens_per_second = 0;  // target tokens per second of this process's run
  int64_t target_tokens = 0;     // target tokens trained on (global, this process's run)
  io::Json last_eval = io::Json::object();
  std::filesystem::path last_checkpoint;
};

class Trainer {
 public:
  // `trained`: the module whose state is checkpointed (parameters and buffers); `optimizer` holds
  // its trainable parameters. The sequences, communicator and log outlive the trainer.
  Trainer(torch::nn::Module& trained, TrainingOptimizer& optimizer, const SequenceSet& sequences,
          Communicator& communicator, StepMetricsLog& metrics, TrainerOptions options);

  TrainerResult run(const MicroBatchLossFn& loss_fn, const EvaluateFn& evaluate, std::ostream& log);

 private:
  io::Json run_evaluation(int64_t step, const EvaluateFn& evaluate, std::ostream& log);

  torch::nn::Module& trained_;
  TrainingOptimizer& optimizer_;
  const SequenceSet& sequences_;
  Communicator& comm_;
  StepMetricsLog& metrics_;
  TrainerOptions options_;
};

}  // namespace rqat::train
