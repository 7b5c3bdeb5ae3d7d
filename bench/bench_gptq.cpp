// GPTQ time for one linear layer on the CPU (scripts/bench_gptq runs it next to a plain PyTorch
// implementation of the same algorithm, scripts/bench_gptq_reference.py, on the same problem).
// The problem is generated from a seed with the same ATen calls in both programs (rqat links the
// very libtorch of the .venv's torch, so both get the same numbers; checksums printed to confirm):
//   W = randn(out, in) * 0.02
//   B = randn(in, 256); m = rand(in) * 2 + 0.2           (channel magnitudes)
//   H = (B B^T / 256 + 0.1 I) * m m^T                    (a correlated, full-rank Hessian)
// Prints "RESULT seconds=... loss=..." and optionally writes Q (float32, row-major) to --out.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "io/error.h"
#include "quant/gptq.h"

int main(int argc, char** argv) {
  CLI::App app{"rqat GPTQ benchmark: seconds to quantize one (out, in) layer"};
  int64_t out_features = 4096, in_features = 4096, group = 128, block = 128, rank = 256;
  int bits = 4, threads = 1, repeats = 1;
  uint64_t seed = 0;
  bool act_order = false;
  std::string out_path;
  app.add_option("--out-features", out_features, "Rows of the weight")->capture_default_str();
  app.add_option("--in-features", in_features, "Columns of the weight")->capture_default_str();
  app.add_option("--bits", bits, "Bit width")->capture_default_str();
  app.add_option("--group-size", group, "Group size (-1: per channel)")->capture_default_str();
  app.add_option("--block-size", block, "GPTQ lazy-update block")->capture_default_str();
  app.add_flag("--act-order", act_order, "Process columns by descending diag(H)");
  app.add_option("--threads", threads, "CPU threads (at::set_num_threads)")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs; the best is reported")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the generated problem")->capture_default_str();
  app.add_option("--out", out_path, "Write Q here (raw float32, row-major)");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto w = at::randn({out_features, in_features}, gen) * 0.02;
    auto b = at::randn({in_features, rank}, gen);
    auto m = at::rand({in_features}, gen) * 2 + 0.2;
    auto h = (at::matmul(b, b.t()) / static_cast<double>(rank) + at::eye(in_features) * 0.1) *
             m.unsqueeze(1) * m.unsqueeze(0);
    std::cout << fmt::format("inputs: sum(W) {:.9e} sum(H) {:.9e}\n",
                             w.sum(at::kDouble).item<double>(), h.sum(at::kDouble).item<double>());

    rqat::quant::QuantSpec spec;
    spec.bits = bits;
    spec.group_size = group;
    rqat::quant::GptqOptions options;
    options.block_size = block;
    options.act_order = act_order;
    options.static_groups = false;  // act-order groups formed dynamically, as in the peer
    options.return_output = !out_path.empty();
    double best = 0;
    rqat::quant::GptqReport report;
    for (int i = 0; i < repeats; ++i) {
      rqat::quant::GptqReport r;
      rqat::quant::gptq_quantize(w, h.clone(), spec, options, &r);
      if (i == 0 || r.seconds < best) best = r.seconds;
      report = std::move(r);
    }
    std::cout << fmt::format(
        "rqat gptq {}x{} W{} group {} block {}{}, {} thread(s): {:.3f} s (damping {} x mean diag, "
        "{} increases)\n",
        out_features, in_features, bits, group, block, act_order ? " act-order" : "", threads, best,
        report.damp_used, report.damp_increases);
    std::cout << fmt::format("RESULT seconds={:.6f} loss={:.9e}\n", best, report.loss);
    if (!out_path.empty()) {
      auto q = report.output.contiguous();
      std::ofstream file(out_path, std::ios::binary);
      file.write(reinterpret_cast<const char*>(q.data_ptr<float>()),
                 static_cast<std::streamsize>(q.numel() * sizeof(float)));
      if (!file) rqat::fail("bench_gptq: cannot write {}", out_path);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_gptq: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
