// Training checkpoints: everything a run needs to continue exactly where it stopped.
//
//   RUN/checkpoints/step-00000120/
//     model_state.safetensors   every parameter and buffer of the trained module (master weights,
//                               quantization scales/zeros/g_idx, norms, ...), under module names
//     optimizer.safetensors     AdamW moments and steps, and the random generator states
//     trainer_state.json        step, data position, counters, the configuration fingerprint
//   RUN/checkpoints/latest      the name of the newest complete checkpoint
//
// A checkpoint is written into a temporary directory and renamed into place, then `latest` is
// replaced atomically, so a kill at any moment leaves the previous checkpoint intact and never a
// partial one under a real name. Older checkpoints beyond `keep` are removed afterwards.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <torch/nn/module.h>

#include "io/json_file.h"
#include "io/safetensors.h"

namespace rqat::train {

struct CheckpointContents {
  int64_t step = 0;  // optimizer steps completed
  io::NamedTensors model_state;
  io::NamedTensors optimizer_state;
  io::Json trainer_state = io::Json::object();
};

// Writes the checkpoint of `contents.step` under run_dir/checkpoints; returns its directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir,
                                      const CheckpointContents& contents, int keep = 2);

struct LoadedCheckpoint {
  std::filesystem::path dir;
  int64_t step = 0;
  io::Json trainer_state;
  std::shared_ptr<io::SafetensorsFile> model_state, optimizer_state;
  // The optimizer tensor `name`, or an undefined tensor when absent.
  at::Tensor optimizer_tensor(const std::string& name) const;
};

// The newest complete checkpoint of run_dir (per `latest`), or nullopt when there is none.
std::optional<LoadedCheckpoint> find_latest_checkpoint(const std::filesystem::path& run_dir);

// Every parameter and buffer of `module`, as stored in model_state.safetensors.
io::NamedTensors module_state(torch::nn::Module& module);
// Copies a saved module state into `module` in place; errors name the checkpoint and tensor.
void restore_module_state(torch::nn::Module& module, const io::SafetensorsFile& state);

// The default CPU generator's state (and CUDA's when available) as named tensors, and back.
io::NamedTensors random_generator_state();
void restore_random_generator_state(const LoadedCheckpoint& checkpoint);

}  // namespace rqat::train
