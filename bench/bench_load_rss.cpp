// Peak memory of loading a model directory, against a naive loader that reads the files into memory
// and copies tensors out (the peer), each in its own process so peaks do not mix. Prints the peak
// resident set added by loading (weights touched and one forward run) divided by the checkpoint
// size, and the anonymous memory (RssAnon: what is not a mapped file page) the loaded model keeps:
// for a GPTQ checkpoint loaded packed that is the kernels' layout, with --dequantize the full
// weights. Usage: bench_load_rss --model DIR --mode mmap|copy [--dtype bf16|f32] [--dequantize]
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "io/checkpoint.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/load_model.h"

namespace {

// Reads VmRSS or VmHWM (kB) from /proc/self/status.
int64_t proc_status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

// The peer: every file read into a heap buffer, every tensor copied out of it.
std::shared_ptr<rqat::model::CausalLM> load_by_copy(const std::filesystem::path& dir,
                                                    at::ScalarType dtype) {
  auto config = rqat::model::ModelConfig::load(dir / "config.json");
  auto model = std::make_shared<rqat::model::CausalLM>(config, at::TensorOptions(dtype));
  rqat::io::CheckpointReader reader(dir);  // for names and offsets only
  std::map<std::string, at::Tensor> copies;
  for (const auto& file : reader.files()) {
    std::ifstream in(file->path(), std::ios::binary);
    std::vector<char> bytes(file->file_size());
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const uint64_t data_start =
        bytes.size() - (file->entries().empty() ? 0 : file->entries().back().end);
    for (const auto& e : file->entries()) {
      auto view =
          at::from_blob(bytes.data() + data_start + e.begin, e.shape, at::TensorOptions(e.dtype));
      copies[e.name] = view.to(dtype).clone();
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().set_data(copies.at(p.key()));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_load_rss: peak RSS of loading a model, mmap loader vs copying loader"};
  std::string dir, mode = "mmap", dtype_name = "bf16";
  app.add_option("--model", dir, "Model directory")->required()->check(CLI::ExistingDirectory);
  app.add_option("--mode", mode, "mmap (rqat's loader) or copy (naive peer)")
      ->check(CLI::IsMember({"mmap", "copy"}));
  app.add_option("--dtype", dtype_name, "Load dtype")->check(CLI::IsMember({"bf16", "f32"}));
  bool dequantize = false;
  app.add_flag("--dequantize", dequantize, "GPTQ checkpoints: dequantize at load (not packed)");
  CLI11_PARSE(app, argc, argv);
  const auto dtype = dtype_name == "bf16" ? at::kBFloat16 : at::kFloat;

  at::ones({8}).sum();  // initialize torch before taking the baseline
  const int64_t baseline_kb = proc_status_kb("VmRSS");
  const int64_t baseline_anon_kb = proc_status_kb("RssAnon");
  const uint64_t checkpoint_bytes = rqat::io::CheckpointReader(dir).total_bytes();

  auto model =
      mode == "mmap" ? rqat::quant::load_model(dir, {dtype, c10::kCPU, dequantize})
                     : load_by_copy(dir, dtype);
  torch::NoGradGuard no_grad;
  double checksum = 0;
  // Touch every page; sum() reduces in place, so no temporary copy inflates the peak.
  for (const auto& p : model->parameters()) checksum += p.sum().item<double>();
  auto logits = model->forward(at::arange(16, at::kLong).view({1, 16}));

  const int64_t peak_kb = proc_status_kb("VmHWM");
  const double anon_mb = (proc_status_kb("RssAnon") - baseline_anon_kb) / 1024.0;
  const double added = (peak_kb - baseline_kb) * 1024.0;
  fmt::print(
      "{:5s} loader: checkpoint {:.1f} MB, baseline RSS {:.1f} MB, peak RSS {:.1f} MB, "
      "added/checkpoint = {:.3f}, peak/checkpoint = {:.3f}, anonymous RSS kept {:.1f} MB "
      "(checksum {:.3g}, logit {:.3g})\n",
      mode, checkpoint_bytes / 1e6, baseline_kb / 1024.0, peak_kb / 1024.0,
      added / checkpoint_bytes, peak_kb * 1024.0 / checkpoint_bytes, anon_mb, checksum,
      logits.abs().max().item<double>());
  return 0;
}
