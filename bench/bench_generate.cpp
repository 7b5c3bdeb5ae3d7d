// Generation throughput of rqat's engine on a model directory: the prompts (token ids) come from a
// JSON file {"prompts": [[ids...], ...]} so that a peer (transformers' generate, driven by
// scripts/bench_generate_reference.py) runs the very same work. EOS is not a stop token, so every
// sample runs --max-new-tokens tokens. Prints generated tokens/s over the wall time of generate()
// (the device synchronized, prefill included, as the peer measures it), the KV cache memory in use
// at the peak against what one contiguous slot of the longest request per running sequence would
// take, and the preemption count. Then the GPU cost of one decode step counted at the dispatcher
// (bench/gpu_cost.h: launches, host reads and their bytes, uploads, graph launches; on a GPU the
// rows of the first decode steps only) and what those counts imply on an H200, as an estimate, for
// the benchmark's batch at its mean context. Lines starting with "RESULT " are for scripts.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "gpu_cost.h"

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "generation/generation_engine.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/model_dir.h"
#include "ops/kernel_choice.h"
#include "quant/load_model.h"

namespace {

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rqat generation benchmark: generated tokens/s of the batched engine"};
  std::string model_dir, prompts_file;
  int64_t max_new_tokens = 128, warmup_tokens = 8;
  int samples = 1, repeats = 1;
  bool count_ops = true;
  std::string estimate_for;  // ROWSxCONTEXT
  uint64_t seed = 0;
  rqat::generation::SamplingParams sampling;
  sampling.temperature = 0;  // greedy unless asked
  rqat::generation::EngineOptions options;
  options.max_batch = 0;  // here: 0 = every row at once
  rqat::cli::RuntimeFlags runtime;
  runtime.device = "cpu";  // benchmarks say what they measure: no "auto"
  runtime.dtype = "f32";
  runtime.threads = 1;
  app.add_option("--model", model_dir, "Model directory")->required();
  app.add_option("--prompts", prompts_file, "JSON file {\"prompts\": [[ids...], ...]}")->required();
  app.add_option("--max-new-tokens", max_new_tokens, "Tokens generated per sample")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--samples", samples, "Samples per prompt (rows = prompts x samples)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // The engine's own flags (--max-batch, --kv-cache-gb, --kv-block-size, ...); --max-batch 0
  // here means every row at once.
  rqat::cli::add_option_flags(app, options);
  app.add_option("--temperature", sampling.temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "Nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of the first prompt (prompt i uses seed + i)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs; the best is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup-tokens", warmup_tokens,
                 "Untimed run of every request with this many tokens first (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--estimate-for", estimate_for,
                 "The H200 estimate for ROWSxCONTEXT (e.g. 256x1024) instead of this run's rows at "
                 "its mean context");
  app.add_flag("!--no-count-ops", count_ops,
               "Skip counting the GPU cost of a decode step (launches, host reads) after timing");
  rqat::cli::add_runtime_flags(app, runtime);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("bench_generate", [&] {
    runtime.apply();
    const c10::Device device = runtime.resolved_device();
    const at::ScalarType dtype = runtime.resolved_dtype();
    auto model = rqat::quant::load_model(model_dir, {dtype, device});
    const auto json = rqat::io::read_json_file(prompts_file);
    std::vector<rqat::generation::GenerationRequest> requests;
    size_t longest = 0;
    for (const auto& p : json.at("prompts")) {
      rqat::generation::GenerationRequest r;
      r.prompt_ids = p.get<std::vector<int32_t>>();
      longest = std::max(longest, r.prompt_ids.size());
      r.num_samples = samples;
      r.seed = seed + requests.size();
      r.params = sampling;
      r.params.max_new_tokens = max_new_tokens;
      r.params.stop_token_ids.clear();  // EOS disabled: every sample runs max_new_tokens
      requests.push_back(std::move(r));
    }
    if (requests.empty()) rqat::fail("{}: no prompts", prompts_file);
    const int64_t rows = static_cast<int64_t>(requests.size()) * samples;
    if (options.max_batch == 0) options.max_batch = rows;
    rqat::generation::GenerationEngine engine(*model, nullptr, options);
    const auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };

    if (warmup_tokens > 0) {  // allocator, thread pool, kernels' first calls, CUDA graphs
      auto warm = requests;
      for (auto& r : warm) r.params.max_new_tokens = std::min(warmup_tokens, max_new_tokens);
      engine.generate(warm);
      sync();
    }

    double best_rate = 0, best_seconds = 0;
    rqat::generation::EngineStats stats;
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      engine.generate(requests);
      sync();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto& s = engine.stats();
      const double rate = static_cast<double>(s.generated_tokens) / seconds;
      if (rate > best_rate) {
        best_rate = rate;
        best_seconds = seconds;
        stats = s;
      }
    }

    const std::string how = sampling.greedy()
                                ? std::string("greedy")
                                : fmt::format("temperature {}, top-p {}, top-k {}",
                                              sampling.temperature, sampling.top_p, sampling.top_k);
    std::cout << fmt::format(
        "rqat: {} prompts x {} samples = {} rows (prompts up to {} tokens), max_batch {}, {} {}, "
        "{} threads, {}: {} tokens in {:.3f} s = {:.1f} tokens/s ({} decode steps, {:.2f} "
        "ms/step incl. prefill)\n",
        requests.size(), samples, rows, longest, options.max_batch, device.str(), runtime.dtype,
        at::get_num_threads(), how, stats.generated_tokens, best_seconds, best_rate,
        stats.decode_steps,
        stats.decode_steps > 0 ? 1000 * best_seconds / static_cast<double>(stats.decode_steps)
                               : 0.0);
    const int64_t peak_kv = stats.peak_blocks_in_use * stats.kv_block_bytes;
    std::cout << fmt::format(
        "rqat: KV cache in use at the peak {} ({} blocks of {} positions, {} KiB each; pool {} "
        "blocks = {}) against {} for contiguous slots ({:.2f}x); {} preemptions; {} "
        "copied to the host by sampling\n",
        mib(peak_kv), stats.peak_blocks_in_use, options.block_size,
        static_cast<double>(stats.kv_block_bytes) / 1024, stats.kv_pool_blocks,
        mib(stats.kv_pool_blocks * stats.kv_block_bytes), mib(stats.contiguous_kv_bytes),
        stats.contiguous_kv_bytes > 0
            ? static_cast<double>(peak_kv) / static_cast<double>(stats.contiguous_kv_bytes)
            : 0.0,
        stats.preemptions, mib(stats.host_bytes));
    std::cout << fmt::format("RESULT tokens_per_s={:.3f}\n", best_rate);
    std::cout << fmt::format(
        "RESULT generated_tokens={} seconds={:.4f} rows={} decode_steps={} prefill_tokens={} "
        "preemptions={} peak_kv_bytes={} contiguous_kv_bytes={} kv_pool_blocks={} "
        "kv_block_bytes={} host_bytes={}\n",
        stats.generated_tokens, best_seconds, rows, stats.decode_steps, stats.prefill_tokens,
        stats.preemptions, peak_kv, stats.contiguous_kv_bytes, stats.kv_pool_blocks,
        stats.kv_block_bytes, stats.host_bytes);
    if (!count_ops) return;
    // The same batch (rows up to max_batch) for 4 and 12 new tokens: 8 decode steps counted.
    std::vector<rqat::generation::GenerationRequest> counted;
    for (int64_t r = 0; r < static_cast<int64_t>(requests.size()) &&
                        static_cast<int64_t>(counted.size()) * samples < options.max_batch;
         ++r)
      counted.push_back(requests[static_cast<size_t>(r)]);
    const auto cost = rqat::bench::decode_step_cost(*model, counted, options, 4, 12);
    const int64_t counted_rows = static_cast<int64_t>(counted.size()) * samples;
    int64_t estimate_rows = rows, context = static_cast<int64_t>(longest) + max_new_tokens / 2;
    if (!estimate_for.empty() &&
        std::sscanf(estimate_for.c_str(), "%ldx%ld", &estimate_rows, &context) != 2)
      rqat::fail("--estimate-for '{}': expected ROWSxCONTEXT, e.g. 256x1024", estimate_for);
    const auto estimate = rqat::bench::h200_estimate(
        cost, rqat::bench::decode_step_bytes(*model, estimate_rows, context),
        rqat::bench::decode_step_flops(*model, estimate_rows, context));
    std::cout << fmt::format(
        "rqat: GPU cost of one decode step of {} rows on {} (--kernels {}, counted at the "
        "dispatcher): {}\n  most launched: {}\n",
        counted_rows, device.str(), rqat::enum_name(rqat::ops::kernel_mode()), cost.summary(),
        cost.top_launches());
    std::cout << fmt::format(
        "rqat: estimate on an H200 for {} rows at context {} (bf16 weights and KV read once a "
        "step): {}\n",
        estimate_rows, context, estimate.text());
    std::cout << fmt::format(
        "RESULT decode_step_launches={} decode_step_syncs={} decode_step_host_bytes={} "
        "decode_step_uploads={} decode_step_unmarked_moves={} decode_step_graph_launches={} "
        "h200_launch_ms={:.4f} h200_hbm_ms={:.4f} h200_compute_ms={:.4f}\n",
        cost.launches, cost.syncs, cost.host_bytes, cost.uploads, cost.unmarked_moves,
        cost.graph_launches, estimate.launch_ms, estimate.hbm_ms, estimate.compute_ms);
  });
}
