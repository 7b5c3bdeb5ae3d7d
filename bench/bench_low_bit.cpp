// Decode throughput of packed low-bit linear layers (ops/low_bit_matmul.h) against LibTorch's dense
// matmul of the same layers, in the same run, on the CPU:
//   1. a stack of `--layers` (default 4) square layers of `--size` (default 4096): y = x W^T
//   through
//      all of them, at batch 1 and 16 (decode steps of 1 and 16 sequences), for float32 and bf16
//      dense weights (at::linear, MKL/oneDNN) and packed W4/W3/W2 g128 (this repository's kernel);
//      tokens/s and the ratio against float32;
//   2. a tiny Qwen3-shaped model exported as a GPTQ checkpoint (W4/W3/W2, g128) and loaded packed
//   and
//      with --dequantize (float32 and bf16), greedy decoding of 32 tokens per sequence by the paged
//      engine at batch 1 and 16.
//   3. (--part 3) one square layer at 1-128 rows of x through the CPU's kernel, its GEMM over
//      dequantized tiles and the dense twin, on every CPU target the machine runs.
// Target (issue 20): packed W4 at batch 1 at least 2x the float32 tokens/s of part 1.
// --device cuda (scripts/gpu-check): part 1 becomes the GEMV's bandwidth at batch 1 on 4096 and
// 8192 square layers against cuBLAS's bf16 GEMV (target: W4/W2 at >= 70% of peak), then part 2 runs
// on the GPU.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <CLI/CLI.hpp>
#ifdef RQAT_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <vector>

#include <unistd.h>

#include "generation/generation_engine.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/init.h"
#include "ops/cpu_target.h"
#include "ops/low_bit_matmul.h"
#include "quant/gptq_checkpoint.h"
#include "quant/load_model.h"
#include "quant/packed_gptq_linear.h"
#include "quant/quant_spec.h"
#include "quant/rtn.h"

using namespace rqat;
using Clock = std::chrono::steady_clock;

namespace {

// Best seconds per call of `fn` over `repeats` timed batches of `calls` (after one warm-up).
double best_seconds(const std::function<void()>& fn, int calls, int repeats) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int c = 0; c < calls; ++c) fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  return best;
}

struct Row {
  std::string name;
  double tokens_per_second[2] = {0, 0};  // batch 1, batch 16
  double bytes = 0;
};

void print_rows(const std::vector<Row>& rows, const char* unit) {
  std::cout << fmt::format("{:<22}{:>12}{:>16}{:>16}{:>12}{:>12}\n", "weights", unit,
                           "tok/s batch 1", "tok/s batch 16", "x f32 b1", "x f32 b16");
  for (const Row& r : rows)
    std::cout << fmt::format("{:<22}{:>12.1f}{:>16.1f}{:>16.1f}{:>11.2f}x{:>11.2f}x\n", r.name,
                             r.bytes / (1 << 20), r.tokens_per_second[0], r.tokens_per_second[1],
                             r.tokens_per_second[0] / rows.front().tokens_per_second[0],
                             r.tokens_per_second[1] / rows.front().tokens_per_second[1]);
}

// GPTQ-checkpoint-like (`checkpoint`): float16 scales, as checkpoints store them, so that the
// kernels read their float16 copies (ops/low_bit_weight.h).
ops::LowBitWeight quantize_rtn(const at::Tensor& w, int bits, int64_t group, bool symmetric = false,
                               bool checkpoint = false) {
  quant::QuantSpec spec;
  spec.bits = bits;
  spec.group_size = group;
  spec.symmetric = symmetric;
  const quant::QuantizedWeight q = quant::rtn_quantize(w, spec);
  const at::Tensor scales = checkpoint ? q.scales.to(at::kHalf).to(at::kFloat) : q.scales;
  return ops::pack_low_bit(q.codes, scales, q.zeros, bits, group, {}, "bench");
}

std::vector<Row> layer_stack(int64_t size, int layers, int repeats) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  std::vector<at::Tensor> dense;
  for (int l = 0; l < layers; ++l) dense.push_back(at::randn({size, size}, gen) / std::sqrt(size));
  std::vector<Row> rows;
  // Tokens/s through the stack at batch 1 and 16, x in `dtype`; `layer(h, l)` applies layer l.
  const auto measure = [&](Row row, at::ScalarType dtype,
                           const std::function<at::Tensor(const at::Tensor&, int)>& layer) {
    const int64_t batches[2] = {1, 16};
    for (int b = 0; b < 2; ++b) {
      const at::Tensor x = at::randn({batches[b], size}, gen).to(dtype);
      const double s = best_seconds(
          [&] {
            at::Tensor h = x;
            for (int l = 0; l < layers; ++l) h = layer(h, l);
          },
          5, repeats);
      row.tokens_per_second[b] = static_cast<double>(batches[b]) / s;
    }
    rows.push_back(row);
  };
  for (const auto& [dtype, name] : {std::pair{at::kFloat, "float32 (at::linear)"},
                                    std::pair{at::kBFloat16, "bf16 (at::linear)"}}) {
    std::vector<at::Tensor> w;
    for (const auto& d : dense) w.push_back(d.to(dtype));
    measure(Row{name, {0, 0}, static_cast<double>(layers * size * size * at::elementSize(dtype))},
            dtype, [&](const at::Tensor& h, int l) { return at::linear(h, w[l]); });
  }
  for (int bits : {4, 3, 2}) {
    std::vector<ops::LowBitWeight> w;
    double bytes = 0;
    for (const auto& d : dense) {
      w.push_back(quantize_rtn(d, bits, 128));
      bytes += static_cast<double>(w.back().bytes());
    }
    measure(Row{fmt::format("packed W{} g128", bits), {0, 0}, bytes}, at::kFloat,
            [&](const at::Tensor& h, int l) { return ops::low_bit_matmul(h, w[l]); });
  }
  // W4 g32 as GPTQ checkpoints hold it (float16 scales), asymmetric and symmetric: what the one
  // zero of a symmetric weight saves (ops/low_bit_weight.h's low_bit_zeros_shared).
  for (const bool symmetric : {false, true}) {
    std::vector<ops::LowBitWeight> w;
    double bytes = 0;
    for (const auto& d : dense) {
      w.push_back(quantize_rtn(d, 4, 32, symmetric, /*checkpoint=*/true));
      bytes += static_cast<double>(w.back().bytes());
    }
    measure(Row{fmt::format("packed W4 g32 {}", symmetric ? "sym" : "asym"), {0, 0}, bytes},
            at::kFloat, [&](const at::Tensor& h, int l) { return ops::low_bit_matmul(h, w[l]); });
  }
  return rows;
}

// Greedy decoding of `new_tokens` per sequence, `batch` sequences at once: generated tokens/s.
double decode_tokens_per_second(model::CausalLM& model, int64_t batch, int64_t new_tokens) {
  std::vector<generation::GenerationRequest> requests(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r) {
    requests[r].prompt_ids = {1, static_cast<int32_t>(5 + r), 9};
    requests[r].params.temperature = 0;
    requests[r].params.max_new_tokens = new_tokens;
  }
  generation::GenerationEngine engine(model, nullptr, generation::EngineOptions{batch});
  engine.generate(requests);  // warm-up
  const auto start = Clock::now();
  engine.generate(requests);
  return static_cast<double>(batch * new_tokens) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<Row> tiny_model(int64_t hidden, int64_t layers, int64_t vocab,
                            const std::filesystem::path& work, c10::Device device) {
  const io::Json json = {{"model_type", "qwen3"},
                         {"hidden_size", hidden},
                         {"intermediate_size", hidden * 3},
                         {"num_hidden_layers", layers},
                         {"num_attention_heads", hidden / 64},
                         {"num_key_value_heads", hidden / 128},
                         {"head_dim", 64},
                         {"vocab_size", vocab},
                         {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000.0},
                         {"max_position_embeddings", 256},
                         {"tie_word_embeddings", true}};
  const model::ModelConfig config = model::ModelConfig::from_json(json, "bench");
  auto reference = std::make_shared<model::CausalLM>(config, at::TensorOptions(at::kFloat));
  model::init_random(*reference, 0);
  std::vector<Row> rows;
  // Where part 2 is, on stderr (unbuffered): the first H200 run crashed in part 2 (a call through
  // a null pointer, 2026-12-04) with its buffered table lost, so each phase says when it starts.
  const auto progress = [](const std::string& what) { std::cerr << "part 2: " << what << "\n"; };
  const auto measure = [&](model::CausalLM& m, const std::string& name, double bytes) {
    Row row{name};
    row.bytes = bytes;
    progress(name + ": decode at batch 1");
    row.tokens_per_second[0] = decode_tokens_per_second(m, 1, 32);
    progress(name + ": decode at batch 16");
    row.tokens_per_second[1] = decode_tokens_per_second(m, 16, 32);
    rows.push_back(row);
  };
  double linear_bytes = 0;
  for (const auto& slot : reference->linear_layers())
    linear_bytes += static_cast<double>((*slot.layer)->effective_weight().numel() * 4);
  if (device.is_cpu()) measure(*reference, "float32", linear_bytes);
  {
    auto bf16 =
        std::make_shared<model::CausalLM>(config, at::TensorOptions(at::kBFloat16).device(device));
    auto target = bf16->named_parameters();
    for (const auto& item : reference->named_parameters())
      target[item.key()].set_data(item.value().to(device, at::kBFloat16));
    measure(*bf16, "bf16", linear_bytes / 2);
  }
  for (int bits : {4, 3, 2}) {
    quant::QuantSpec spec;
    spec.bits = bits;
    spec.group_size = 128;
    std::map<std::string, quant::QuantizedWeight> layers_q;
    for (const auto& slot : reference->linear_layers())
      layers_q[slot.name] = quant::rtn_quantize((*slot.layer)->effective_weight(), spec);
    const auto dir = work / fmt::format("w{}", bits);
    quant::GptqExportOptions options;
    options.round_scales_to_fp16 = true;  // RTN's float32 scales, stored as GPTQ's float16
    options.allow_v1_zero_wrap = true;
    options.method = "rtn";
    progress(fmt::format("W{}: GPTQ export and packed load", bits));
    quant::export_gptq_checkpoint(*reference, layers_q, spec, dir, options);
    auto packed = quant::load_model(
        dir, model::LoadOptions{device.is_cpu() ? at::kFloat : at::kBFloat16, device});
    double bytes = 0;
    for (const auto& slot : packed->linear_layers())
      if (auto p = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer))
        bytes += static_cast<double>(p->compute_bytes());
    measure(*packed, fmt::format("GPTQ W{} packed", bits), bytes);
  }
  return rows;
}

#ifdef RQAT_WITH_CUDA
// Weights in rotation per measured layer shape: ten times an H100/H200's L2 cache (50 MB), so every
// call reads its weight from HBM, as a decode step through a model's layers does.
constexpr double kRotationBytes = 512.0 * (1 << 20);

// Seconds per call of `call(k)`, k = 0 .. copies - 1 in turn: `graph` replays the calls captured in
// a CUDA graph (the kernels' own time, no host launch overhead), else they are called from the host
// (what an eager decode step pays).
double cuda_seconds_per_call(int copies, const std::function<void(int)>& call, bool graph,
                             int repeats) {
  const auto all = [&] {
    for (int k = 0; k < copies; ++k) call(k);
  };
  if (!graph)
    return best_seconds(
               [&] {
                 all();
                 torch::cuda::synchronize();
               },
               3, repeats) /
           copies;
  at::cuda::CUDAGraph captured;
  {
    // Warm-up (cuBLAS workspaces) and capture on one side stream, as torch asks.
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    all();
    captured.capture_begin();
    try {
      all();
    } catch (...) {
      // End the capture, so that the stream (and the benchmarks after this one) work again.
      cudaGraph_t abandoned = nullptr;
      cudaStreamEndCapture(side.stream(), &abandoned);
      if (abandoned != nullptr) cudaGraphDestroy(abandoned);
      throw;
    }
    captured.capture_end();
  }
  torch::cuda::synchronize();
  return best_seconds(
             [&] {
               captured.replay();
               torch::cuda::synchronize();
             },
             3, repeats) /
         copies;
}

// CUDA: the packed GEMV at batch 1 (bf16 x, as a bf16 model decodes) on (size x size) layers
// against the dense bf16 GEMV (at::linear, cuBLAS) of the same layers: bandwidth achieved = bytes a
// call must read (weights and their scales/zeros, x) / its time in a CUDA graph, as a fraction of
// `peak_gbps`; and the time per call launched from the host.
void cuda_bandwidth(double peak_gbps, int repeats) {
  const at::Device cuda(at::kCUDA);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  std::cout << fmt::format("{:<24}{:>10}{:>8}{:>14}{:>14}{:>12}{:>9}\n", "layer (batch 1, bf16 x)",
                           "MiB read", "copies", "us/call graph", "us/call eager", "GB/s",
                           "of peak");
  for (int64_t size : {4096, 8192}) {
    const at::Tensor w = at::randn({size, size}, gen) / std::sqrt(static_cast<double>(size));
    const at::Tensor x = at::randn({1, size}, gen).to(cuda, at::kBFloat16);
    const auto report = [&](const std::string& name, double bytes,
                            const std::function<void(int)>& call, int copies) {
      const double eager = cuda_seconds_per_call(copies, call, false, repeats);
      double graph = eager;
      try {
        graph = cuda_seconds_per_call(copies, call, true, repeats);
      } catch (const std::exception& e) {  // then the eager time stands in, and says so
        std::cout << fmt::format("{}: CUDA graph capture failed, eager time used: {}\n", name,
                                 std::string(e.what()).substr(0, 200));
      }
      const double gbps = bytes / graph / 1e9;
      std::cout << fmt::format("{:<24}{:>10.1f}{:>8}{:>14.2f}{:>14.2f}{:>12.1f}{:>8.0f}%\n", name,
                               bytes / (1 << 20), copies, graph * 1e6, eager * 1e6, gbps,
                               peak_gbps > 0 ? 100 * gbps / peak_gbps : 0.0)
                << std::flush;  // kept in the log if a later part runs out of time
    };
    const auto copies_of = [](double bytes) {
      return static_cast<int>(std::max(1.0, std::ceil(kRotationBytes / bytes)));
    };
    {
      const double bytes = static_cast<double>(size * size * 2 + size * 2);
      std::vector<at::Tensor> dense(copies_of(bytes));
      for (auto& d : dense) d = w.to(cuda, at::kBFloat16);
      report(
          fmt::format("bf16 dense {}x{}", size, size), bytes,
          [&](int k) { (void)at::linear(x, dense[k]); }, static_cast<int>(dense.size()));
    }
    for (int bits : {4, 2}) {
      const ops::LowBitWeight packed = quantize_rtn(w, bits, 128).to(cuda);
      const double bytes = static_cast<double>(packed.bytes() + size * 2);
      std::vector<ops::LowBitWeight> layers(copies_of(bytes), packed);
      for (auto& l : layers) {
        l.codes = l.codes.clone();
        l.scales = l.scales.clone();
        l.zeros = l.zeros.clone();
      }
      report(
          fmt::format("packed W{} g128 {}x{}", bits, size, size), bytes,
          [&](int k) { (void)ops::low_bit_matmul(x, layers[k]); }, static_cast<int>(layers.size()));
    }
  }
}
#endif

// Part 3: x W^T of one square layer at 1-128 rows of x (a decode step of that many sequences,
// or a prompt of that many tokens) through the CPU's three float paths, on every CPU target this
// machine runs (ops/cpu_target.h): the packed kernel, the GEMM over dequantized tiles (what
// low_bit_matmul runs beyond kLowBitGemmRows) and the whole weight dequantized by PyTorch's
// operators, then one matmul (the twin; the many-row path before the tiles).
void many_rows(int64_t size, int repeats) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor w = at::randn({size, size}, gen) * 0.02;
  std::cout << fmt::format("{:<8}{:<10}{:>6}{:>14}{:>14}{:>14}{:>12}\n", "weights", "target",
                           "rows", "kernel ms", "tiles ms", "twin ms", "best");
  for (const int bits : {4, 2}) {
    const ops::LowBitWeight layer = quantize_rtn(w, bits, 128);
    for (int t = 0; t < static_cast<int>(ops::CpuTarget::kCount); ++t) {
      const auto target = static_cast<ops::CpuTarget>(t);
      if (!ops::cpu_target_supported(target)) continue;
      ops::set_cpu_target(target);
      for (const int64_t rows : {1, 8, 16, 32, 64, 128}) {
        const at::Tensor x = at::randn({rows, size}, gen);
        const auto ms = [&](const std::function<void()>& fn) {
          return 1e3 * best_seconds(fn, 2, repeats);
        };
        const double kernel = ms([&] { (void)ops::low_bit_matmul_cpu_kernel(x, layer); });
        const double tiles = ms([&] { (void)ops::low_bit_matmul_cpu_gemm(x, layer); });
        const double twin = ms([&] { (void)ops::low_bit_matmul_dense(x, layer); });
        const double best = std::min({kernel, tiles, twin});
        std::cout << fmt::format("W{} g128 {:<10}{:>6}{:>14.3f}{:>14.3f}{:>14.3f}{:>12}\n", bits,
                                 enum_name(target), rows, kernel, tiles, twin,
                                 best == kernel  ? "kernel"
                                 : best == tiles ? "tiles"
                                                 : "twin");
      }
    }
  }
  ops::set_cpu_target(std::nullopt);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rqat packed low-bit decode benchmark"};
  int64_t size = 4096, hidden = 512, tiny_layers = 8, vocab = 4096;
  int layers = 4, repeats = 3, threads = 0;
  double peak_gbps = 0;
  std::string device_name = "cpu";
  app.add_option("--size", size, "Square layer size of part 1")->capture_default_str();
  app.add_option("--layers", layers, "Layers in the stack of part 1")->capture_default_str();
  app.add_option("--hidden", hidden, "Hidden size of the model of part 2")->capture_default_str();
  app.add_option("--tiny-layers", tiny_layers, "Layers of that model")->capture_default_str();
  app.add_option("--vocab", vocab, "Its vocabulary")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed repeats (best kept)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str();
  app.add_option("--device", device_name,
                 "cpu (parts 1 and 2) or cuda (GEMV bandwidth, then part 2 on the GPU; e.g. "
                 "--hidden 1024 --tiny-layers 28 --vocab 151936 for Qwen3-0.6B's shape)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--peak-gbps", peak_gbps, "CUDA: the GPU's peak memory bandwidth (GB/s)");
  int part = 0;
  app.add_option("--part", part,
                 "Run only part 1, 2 or 3 (3: the CPU's many-row paths per CPU target, on one "
                 "--size square layer; 0: parts 1 and 2)")
      ->check(CLI::IsMember({0, 1, 2, 3}));
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) at::set_num_threads(threads);
    c10::InferenceMode guard;
    const auto work =
        std::filesystem::temp_directory_path() / fmt::format("rqat_bench_low_bit_{}", ::getpid());
    int status = 0;
    if (part == 3) {
      std::cout << fmt::format("{} threads, CPU targets: {}\n\n3. one {} x {} layer: x W^T\n",
                               at::get_num_threads(), ops::cpu_target_description(), size, size);
      many_rows(size, repeats);
      return 0;
    }
    if (part != 2 && device_name == "cuda") {
      if (!torch::cuda::is_available()) rqat::fail("--device cuda: no CUDA device");
#ifdef RQAT_WITH_CUDA
      std::cout << "1. packed GEMV at batch 1 (CUDA): bandwidth achieved\n";
      cuda_bandwidth(peak_gbps, repeats);
#else
      rqat::fail("--device cuda: this build has no CUDA kernels");
#endif
    } else if (part != 2) {
      std::cout << fmt::format(
          "{} threads\n\n1. {} layers of {} x {}: y = x W^T through the stack\n",
          at::get_num_threads(), layers, size, size);
      const std::vector<Row> stack = layer_stack(size, layers, repeats);
      print_rows(stack, "MiB");
      const double w4 = stack[2].tokens_per_second[0] / stack[0].tokens_per_second[0];
      std::cout << fmt::format("packed W4 at batch 1: {:.2f}x float32 (target >= 2x): {}\n", w4,
                               w4 >= 2 ? "ok" : "MISSED");
      status = w4 >= 2 ? 0 : 1;
    }
    if (part == 1) return status;
    std::cout << fmt::format(
        "\n2. Qwen3-shaped model, hidden {}, {} layers, vocab {} ({}): greedy decode, 32 tokens "
        "per sequence\n",
        hidden, tiny_layers, vocab, device_name);
    const std::vector<Row> tiny =
        tiny_model(hidden, tiny_layers, vocab, work, c10::Device(device_name));
    print_rows(tiny, "MiB linear");
    std::filesystem::remove_all(work);
    return status;
  } catch (const std::exception& e) {
    std::cerr << "bench_low_bit: " << e.what() << "\n";
    return 1;
  }
}
