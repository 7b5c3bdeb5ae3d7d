// What every training tool (qat-sft, qat-kd, grpo) does around its steps, in one place: resume
// from the latest checkpoint or start fresh (metrics history, identical weights on every rank),
// write checkpoints from rank 0 while the others wait, and stop on a non-finite loss or gradient
// norm with a message naming the step and the last good checkpoint.
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "io/json_file.h"
#include "train/distributed.h"
#include "train/step_metrics_log.h"
#include "io/stop_request.h"
#include "train/training_optimizer.h"

namespace rqat::train {

class TrainingRun {
 public:
  // `fingerprint`: the settings a checkpoint must have been made with to be resumed (see
  // TrainerOptions::fingerprint). All references outlive the run.
  TrainingRun(torch::nn::Module& trained, TrainingOptimizer& optimizer, Communicator& comm,
              StepMetricsLog& metrics, std::filesystem::path out_dir, io::Json fingerprint,
              int keep_checkpoints, std::string tool);

  // With `resume` and a checkpoint in out_dir: restores the module, optimizer and random generator
  // states, keeps the metrics up to its step and returns its trainer state (with "step"). Else
  // starts a fresh metrics history, gives every rank rank 0's trainable weights and returns
  // nullopt. A checkpoint made with another fingerprint is refused, naming the first difference.
  std::optional<io::Json> start(bool resume, std::ostream& log);

  // Rank 0 writes the checkpoint of `steps_done` (module, optimizer, generators, `state`) and
  // metrics.h5; every rank waits for it. Returns the directory (empty on other ranks).
  std::filesystem::path checkpoint(int64_t steps_done, io::Json state);

  // True on every rank once any rank got SIGTERM/SIGINT (handlers live as long as the run), so all
  // stop after the same step.
  bool stop_requested();
  // Ends a run stopped by a signal after `steps_done` steps: writes the checkpoint (with `state`),
  // says how to continue, and returns the signal (the tool exits with 128 + it).
  int stop_for_signal(int64_t steps_done, int64_t total_steps, io::Json state, std::ostream& log);

  // Throws "step N: the WHAT is nan; ..." when value is not finite. Called before the update, so
  // the weights and the last checkpoint stay good.
  void check_finite(int64_t step, const std::string& what, double value) const;

  const std::filesystem::path& last_checkpoint() const { return last_checkpoint_; }

 private:
  torch::nn::Module& trained_;
  TrainingOptimizer& optimizer_;
  Communicator& comm_;
  StepMetricsLog& metrics_;
  std::filesystem::path out_dir_;
  io::Json fingerprint_;
  int keep_checkpoints_;
  std::string tool_;
  std::filesystem::path last_checkpoint_;
  io::StopRequest stop_;
};

// The first key (a dotted path) whose value differs between two fingerprints, "" when equal.
std::string first_difference(const io::Json& a, const io::Json& b, const std::string& prefix = "");

}  // namespace rqat::train
