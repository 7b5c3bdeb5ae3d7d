#include "train/training_run.h"

#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <map>
#include <ostream>

#include "io/error.h"
#include "io/options.h"
#include "train/train_checkpoint.h"

namespace rqat::train {

std::string first_difference(const io::Json& a, const io::Json& b, const std::string& prefix) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (!b.contains(key)) return path;
      const std::string inner = first_difference(value, b[key], path);
      if (!inner.empty()) return inner;
    }
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) return prefix.empty() ? key : prefix + "." + key;
    return "";
  }
  return a == b ? "" : (prefix.empty() ? "(root)" : prefix);
}

TrainingRun::TrainingRun(torch::nn::Module& trained, TrainingOptimizer& optimizer,
                         Communicator& comm, StepMetricsLog& metrics, std::filesystem::path out_dir,
                         io::Json fingerprint, int keep_checkpoints, std::string tool)
    : trained_(trained),
      optimizer_(optimizer),
      comm_(comm),
      metrics_(metrics),
      out_dir_(std::move(out_dir)),
      fingerprint_(std::move(fingerprint)),
      keep_checkpoints_(keep_checkpoints),
      tool_(std::move(tool)) {
  if (keep_checkpoints_ < 1) fail("--keep-checkpoints must be >= 1, got {}", keep_checkpoints_);
}

std::optional<io::Json> TrainingRun::start(bool resume, std::ostream& log) {
  std::optional<LoadedCheckpoint> checkpoint;
  if (resume) checkpoint = find_latest_checkpoint(out_dir_);
  if (!checkpoint) {
    metrics_.start_fresh();
    // Every process loaded the same files; broadcasting rank 0's values makes sure they start
    // identical even if a file changed between process starts.
    if (comm_.world_size() > 1) {
      torch::NoGradGuard no_grad;
      auto tensors = optimizer_.tensors();
      comm_.broadcast_from_main(tensors);
    }
    optimizer_.weights_ready();
    return std::nullopt;
  }
  const io::Json& saved = checkpoint->trainer_state;
  const io::Json saved_fingerprint = saved.value("fingerprint", io::Json::object());
  const io::Json compared = io::comparable_fingerprint(fingerprint_, saved_fingerprint);
  const std::string diff = first_difference(saved_fingerprint, compared);
  if (!diff.empty())
    fail("--resume: {} was made with a different '{}'; use another --out or the same settings",
         checkpoint->dir.string(), diff);
  restore_module_state(trained_, *checkpoint->model_state);
  optimizer_.load_state([&](const std::string& name) { return checkpoint->optimizer_tensor(name); },
                        checkpoint->optimizer_state->path().string());
  restore_random_generator_state(*checkpoint);
  optimizer_.weights_ready();
  metrics_.resume_at(checkpoint->step);
  last_checkpoint_ = checkpoint->dir;
  log << fmt::format("resumed from {} (step {})\n", checkpoint->dir.string(), checkpoint->step);
  return saved;
}

std::filesystem::path TrainingRun::checkpoint(int64_t steps_done, io::Json state) {
  std::filesystem::path dir;
  // Sharded: every rank sends its slices, the main rank assembles the same files an unsharded
  // run writes (fp32 master weights under the parameters' names), resumable at any world size.
  io::NamedTensors masters = optimizer_.master_weights();
  io::NamedTensors optimizer_state = optimizer_.state_tensors();
  if (comm_.is_main()) {
    CheckpointContents contents;
    contents.step = steps_done;
    contents.model_state = module_state(trained_);
    if (!masters.empty()) {
      std::map<std::string, at::Tensor> by_name(masters.begin(), masters.end());
      for (auto& [name, tensor] : contents.model_state)
        if (auto it = by_name.find(name); it != by_name.end()) tensor = it->second;
    }
    contents.optimizer_state = std::move(optimizer_state);
    for (auto& entry : random_generator_state()) contents.optimizer_state.push_back(entry);
    state["fingerprint"] = fingerprint_;
    contents.trainer_state = std::move(state);
    dir = save_checkpoint(out_dir_, contents, keep_checkpoints_);
    metrics_.write_hdf5({{"tool", tool_}});
  }
  comm_.barrier();
  last_checkpoint_ = dir;
  return dir;
}

bool TrainingRun::stop_requested() { return comm_.any(stop_.requested()); }

int TrainingRun::stop_for_signal(int64_t steps_done, int64_t total_steps, io::Json state,
                                 std::ostream& log) {
  const int signal = stop_.signal() != 0 ? stop_.signal() : SIGTERM;  // another rank's signal
  const auto dir = checkpoint(steps_done, std::move(state));
  log << fmt::format(
      "stopped at step {} of {} by signal {}; checkpoint {}; rerun with --resume to continue\n",
      steps_done, total_steps, signal, dir.string());
  return signal;
}

void TrainingRun::check_finite(int64_t step, const std::string& what, double value) const {
  if (std::isfinite(value)) return;
  const std::string last_good = last_checkpoint_.empty()
                                    ? std::string("none was written")
                                    : "the last good one is " + last_checkpoint_.string();
  fail(
      "step {}: the {} is {}; stopped before updating the weights (checkpoint: {}); lower --lr or "
      "check the data",
      step, what, value, last_good);
}

}  // namespace rqat::train
