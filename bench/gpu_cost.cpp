// See gpu_cost.h.
#include "gpu_cost.h"

#include <fmt/format.h>

#include <functional>
#include <ostream>
#include <sstream>

#include "io/error.h"

namespace rqat::bench {

namespace {

// The H200 figures of the estimate (NVIDIA's data sheet; the launch cost is a typical eager
// PyTorch operator's host-side cost, kernel included, measured on H100-class machines).
constexpr double kLaunchSeconds = 4e-6;
constexpr double kHbmBytesPerSecond = 4.8e12;
constexpr double kBf16FlopsPerSecond = 989e12;

// Counts of `body` run once more after a warm-up run.
OpCounts counted_after_warm_up(const std::function<void()>& body) {
  body();
  OpCounter counter;
  body();
  return counter.counts();
}

// The weights a decode step multiplies by: all of them but an untied input embedding (a lookup of
// a few rows); a tied one is the output layer.
double matmul_weights(const model::CausalLM& model) {
  double weights = 0;
  for (const auto& p : model.parameters()) weights += static_cast<double>(p.numel());
  const auto& c = model.config();
  return c.tie_word_embeddings ? weights
                               : weights - static_cast<double>(c.vocab_size * c.hidden_size);
}

// run(k, log) with k = 1 (first uses: self-checks, allocator), then counted with 3 and 2: the cost
// of what the third unit adds. A run that fails stops with its log.
OpCounts third_minus_second_run(const char* what,
                                const std::function<int(int64_t, std::ostream&)>& run) {
  const auto counted = [&](int64_t k) {
    std::ostringstream log;
    OpCounter counter;
    if (run(k, log) != 0) fail("{}: the run failed: {}", what, log.str());
    return counter.counts();
  };
  counted(1);
  return counted(3) - counted(2);
}

}  // namespace

OpCounts decode_step_cost(model::CausalLM& model,
                          std::vector<generation::GenerationRequest> requests,
                          const generation::EngineOptions& engine, int64_t short_tokens,
                          int64_t long_tokens) {
  if (long_tokens <= short_tokens) fail("decode_step_cost: long_tokens must exceed short_tokens");
  generation::GenerationEngine runner(model, nullptr, engine);
  const auto run = [&](int64_t new_tokens) {
    for (auto& r : requests) {
      r.params.max_new_tokens = new_tokens;
      r.params.stop_token_ids.clear();
      r.params.stop_strings.clear();
    }
    return counted_after_warm_up([&] { runner.generate(requests); });
  };
  return (run(long_tokens) - run(short_tokens)).per(long_tokens - short_tokens);
}

OpCounts qat_step_cost(tools::QatCommandOptions options) {
  const auto base = options.out_dir;
  return third_minus_second_run("qat_step_cost", [&](int64_t steps, std::ostream& log) {
    options.trainer.steps = steps;
    options.trainer.show_progress = false;
    options.out_dir = base.string() + fmt::format("-{}-steps", steps);
    return tools::run_qat_command(options, log).exit_code;
  });
}

OpCounts grpo_update_cost(tools::GrpoCommandOptions options) {
  const auto base = options.out_dir;
  return third_minus_second_run("grpo_update_cost", [&](int64_t epochs, std::ostream& log) {
    options.epochs = epochs;
    options.minibatches = 1;
    options.trainer.steps = 1;
    options.trainer.show_progress = false;
    options.out_dir = base.string() + fmt::format("-{}-epochs", epochs);
    return tools::run_grpo_command(options, log).exit_code;
  });
}

std::string H200Estimate::text() const {
  return fmt::format("launch-bound {:.3f} ms, HBM {:.3f} ms, compute {:.3f} ms, {} host read{}",
                     launch_ms, hbm_ms, compute_ms, host_reads, host_reads == 1 ? "" : "s");
}

H200Estimate h200_estimate(const OpCounts& counts, double hbm_bytes, double flops) {
  H200Estimate e;
  e.launch_ms = 1e3 * kLaunchSeconds * static_cast<double>(counts.launches);
  e.hbm_ms = 1e3 * hbm_bytes / kHbmBytesPerSecond;
  e.compute_ms = 1e3 * flops / kBf16FlopsPerSecond;
  e.host_reads = counts.syncs;
  return e;
}

double decode_step_bytes(const model::CausalLM& model, int64_t rows, int64_t context) {
  const auto& c = model.config();
  const double kv = 2.0 * static_cast<double>(c.num_hidden_layers * c.num_key_value_heads *
                                              c.head_dim * context * rows);
  return 2.0 * (matmul_weights(model) + kv);  // bf16
}

double decode_step_flops(const model::CausalLM& model, int64_t rows, int64_t context) {
  const auto& c = model.config();
  const double attention =
      4.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim * context);
  return static_cast<double>(rows) * (2.0 * matmul_weights(model) + attention);
}

}  // namespace rqat::bench
