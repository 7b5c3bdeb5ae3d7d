// Attention on the CPU: rqat's fused kernels (ops/attention.h) against ATen's
// scaled_dot_product_attention (what the decoder used before, and what PyTorch code calls) on the
// same inputs in the same process and threads, forward alone (no grad: teacher, prefill) and
// forward + backward (training). Causal mask as the decoder builds it: bool (B, 1, T, T).
// One line per shape with the median milliseconds of both and the ratio SDPA / fused (> 1: fused
// faster); the shape list covers the head sizes of the models rqat meets (8 in stories260K, 32 in
// the benchmark model, 64 in Qwen2.5-0.5B/Llama-3.2-1B, 128 in Qwen2.5-1.5B/Qwen3) and decides
// kFusedAttentionMaxDim.
// Usage: bench_attention [--threads N] [--repeats N] [--shape B,H,KV,T,D ...]
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/autograd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>

#include "io/error.h"
#include "ops/attention.h"

namespace {

double median_ms(int repeats, const std::function<void()>& run) {
  run();  // warm-up: first-touch allocations, thread pool start
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(std::stoll(part));
  if (out.size() != 5) rqat::fail("--shape {}: expected B,H,KV,T,D", text);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rqat attention benchmark: fused CPU kernels against ATen SDPA"};
  int threads = 1, repeats = 5;
  std::vector<std::string> shapes = {"8,8,4,128,8",    "8,8,4,256,32",   "4,14,2,512,64",
                                     "1,14,2,2048,64", "2,12,2,512,128", "1,12,2,2048,128"};
  app.add_option("--threads", threads, "CPU threads (at::set_num_threads)")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs; the median is reported")->capture_default_str();
  app.add_option("--shape", shapes, "B,H,KV,T,D (repeatable)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
    std::cout << fmt::format("{:>22} {:>10} {:>10} {:>7} {:>12} {:>12} {:>7} {:>9}\n",
                             "shape B,H,KV,T,D", "fwd fused", "fwd sdpa", "ratio", "fwd+bwd fused",
                             "fwd+bwd sdpa", "ratio", "max diff");
    for (const auto& text : shapes) {
      const auto s = parse_shape(text);
      const int64_t b = s[0], h = s[1], kv = s[2], t = s[3], d = s[4];
      auto q = at::randn({b, h, t, d}, gen).requires_grad_();
      auto k = at::randn({b, kv, t, d}, gen).requires_grad_();
      auto v = at::randn({b, kv, t, d}, gen).requires_grad_();
      const auto mask = at::ones({t, t}, at::kBool).tril().view({1, 1, t, t}).expand({b, 1, t, t});
      const auto dout = at::randn({b, h, t, d}, gen);
      const auto sdpa = [&] {
        return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, kv != h);
      };
      const auto fused = [&] { return rqat::ops::fused_attention(q, k, v, mask); };
      double diff = 0;
      {
        at::NoGradGuard no_grad;
        diff = (fused() - sdpa()).abs().max().item<double>();
      }
      const auto forward = [&](const std::function<at::Tensor()>& f) {
        return median_ms(repeats, [&] {
          at::NoGradGuard no_grad;
          f();
        });
      };
      const auto training = [&](const std::function<at::Tensor()>& f) {
        return median_ms(repeats, [&] { torch::autograd::grad({f()}, {q, k, v}, {dout}); });
      };
      const double fwd_fused = forward(fused), fwd_sdpa = forward(sdpa);
      const double train_fused = training(fused), train_sdpa = training(sdpa);
      std::cout << fmt::format(
          "{:>22} {:>10.2f} {:>10.2f} {:>6.2f}x {:>12.2f} {:>12.2f} {:>6.2f}x "
          "{:>9.1e}\n",
          text, fwd_fused, fwd_sdpa, fwd_sdpa / fwd_fused, train_fused, train_sdpa,
          train_sdpa / train_fused, diff);
    }
    std::cout << fmt::format(
        "milliseconds, median of {} runs, {} thread(s); ratio = sdpa / fused\n", repeats, threads);
  } catch (const std::exception& e) {
    std::cerr << "bench_attention: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
