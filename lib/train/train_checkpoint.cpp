#include "train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <vector>

#include "io/atomic_file.h"
#include "io/error.h"

namespace rqat::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelState = "model_state.safetensors";
constexpr const char* kOptimizerState = "optimizer.safetensors";
constexpr const char* kTrainerState = "trainer_state.json";

std::string checkpoint_name(int64_t step) { return fmt::format("step-{:08d}", step); }

// Checkpoint directories of run_dir/checkpoints, oldest first (names sort by step).
std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.starts_with("step-") &&
        fs::exists(entry.path() / kTrainerState))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, const CheckpointContents& contents, int keep) {
  const fs::path root = run_dir / "checkpoints";
  const fs::path final_dir = root / checkpoint_name(contents.step);
  const fs::path temp_dir = root / (".tmp-" + checkpoint_name(contents.step));
  fs::create_directories(root);
  fs::remove_all(temp_dir);
  fs::create_directories(temp_dir);
  io::save_safetensors(temp_dir / kModelState, contents.model_state);
  io::save_safetensors(temp_dir / kOptimizerState, contents.optimizer_state);
  io::Json state = contents.trainer_state;
  state["step"] = contents.step;
  io::write_json_file(temp_dir / kTrainerState, state);
  // Replacing a checkpoint of the same step (a rerun after resume) keeps the old one until the
  // new one is complete.
  if (fs::exists(final_dir)) {
    const fs::path old = root / (".old-" + checkpoint_name(contents.step));
    fs::remove_all(old);
    fs::rename(final_dir, old);
    fs::rename(temp_dir, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(temp_dir, final_dir);
  }
  io::write_text_atomically(root / "latest", checkpoint_name(contents.step) + "\n");
  auto all = complete_checkpoints(root);
  const auto latest = std::find(all.begin(), all.end(), final_dir);
  // Keep the newest `keep` up to and including this one; later ones (from a run that went
  // further before an earlier checkpoint was resumed) are stale and go too.
  for (auto it = all.begin(); it != all.end(); ++it) {
    const bool stale = it > latest;
    const bool old = latest - it >= keep;
    if (*it != final_dir && (stale || old)) fs::remove_all(*it);
  }
  return final_dir;
}

at::Tensor LoadedCheckpoint::optimizer_tensor(const std::string& name) const {
  if (!optimizer_state || !optimizer_state->contains(name)) return {};
  return optimizer_state->tensor(name);
}

std::optional<LoadedCheckpoint> find_latest_checkpoint(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  const fs::path latest_file = root / "latest";
  if (!fs::exists(latest_file)) return std::nullopt;
  std::ifstream in(latest_file);
  std::string name;
  std::getline(in, name);
  const fs::path dir = root / name;
  if (name.empty() || !fs::exists(dir / kTrainerState))
    fail("{}: names '{}', which is not a complete checkpoint", latest_file.string(), name);
  LoadedCheckpoint out;
  out.dir = dir;
  out.trainer_state = io::read_json_file(dir / kTrainerState);
  if (!out.trainer_state.contains("step") || !out.trainer_state["step"].is_number_integer())
    fail("{}: field 'step' is missing", (dir / kTrainerState).string());
  out.step = out.trainer_state["step"].get<int64_t>();
  out.model_state = io::SafetensorsFile::open(dir / kModelState);
  out.optimizer_state = io::SafetensorsFile::open(dir / kOptimizerState);
  return out;
}

io::NamedTensors module_state(torch::nn::Module& module) {
  io::NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value().detach());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    out.emplace_back(item.key(), item.value().detach());
  return out;
}

void restore_module_state(torch::nn::Module& module, const io::SafetensorsFile& state) {
  torch::NoGradGuard no_grad;
  const std::string file = state.path().string();
  auto restore = [&](const std::string& name, at::Tensor& target) {
    if (!state.contains(name)) fail("{}: tensor {} is missing", file, name);
    const at::Tensor saved = state.tensor(name);
    if (saved.sizes() != target.sizes() || saved.scalar_type() != target.scalar_type())
      fail("{}: tensor {} does not match the model (shape or dtype differs)", file, name);
    target.copy_(saved);
  };
  for (auto& item : module.named_parameters(/*recurse=*/true)) restore(item.key(), item.value());
  for (auto& item : module.named_buffers(/*recurse=*/true)) restore(item.key(), item.value());
}

io::NamedTensors random_generator_state() {
  io::NamedTensors out;
  out.emplace_back("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (at::hasCUDA()) {
    const auto& generator = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, 0));
    out.emplace_back("rng.cuda", generator.get_state());
  }
  return out;
}

void restore_random_generator_state(const LoadedCheckpoint& checkpoint) {
  const at::Tensor cpu = checkpoint.optimizer_tensor("rng.cpu");
  if (cpu.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(cpu.clone());
  }
  const at::Tensor cuda = checkpoint.optimizer_tensor("rng.cuda");
  if (cuda.defined() && at::hasCUDA()) {
    at::Generator generator = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, 0));
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(cuda.clone());
  }
}

}  // namespace rqat::train
