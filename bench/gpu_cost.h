// The GPU cost of rqat's three hot loops, counted on the CPU with the op counter (op_counter.h):
// one engine decode step, one qat-kd optimizer step, one grpo update. Each comes from the
// difference of two runs that differ by a known number of steps, so that set-up, prefill and the
// first-use self-checks cancel. Shared by the benchmarks that print the counts (bench_generate,
// bench_qat_step, bench_grpo_update) and the test that bounds them (tests/test_gpu_cost.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generation/generation_engine.h"
#include "model/decoder.h"
#include "op_counter.h"
#include "tools/grpo_command.h"
#include "tools/qat_command.h"

namespace rqat::bench {

// Per decode step: generate(requests) with every request's max_new_tokens set to `short_tokens`
// and to `long_tokens` (stop tokens cleared, so every sample runs to its length), each run warmed
// up once; the difference over long - short steps.
OpCounts decode_step_cost(model::CausalLM& model,
                          std::vector<generation::GenerationRequest> requests,
                          const generation::EngineOptions& engine, int64_t short_tokens = 8,
                          int64_t long_tokens = 24);

// Per optimizer step of run_qat_command(options): trainer.steps 3 minus 2 (out_dir gets suffixes).
OpCounts qat_step_cost(tools::QatCommandOptions options);

// Per update of run_grpo_command(options) (one step): epochs 3 minus 2, minibatches 1; both passes
// score the old policy, which a single pass skips.
OpCounts grpo_update_cost(tools::GrpoCommandOptions options);

// What counts imply on an H200, as an estimate: launch-bound time (launches x 4 us, eager), HBM
// time (bytes / 4.8 TB/s), compute time (FLOPs / 989 TFLOP/s dense bf16), and the host reads (each
// a round trip of ~10 us). "launch 1.23 ms, HBM 0.25 ms, compute 0.01 ms, host reads 1".
struct H200Estimate {
  double launch_ms = 0, hbm_ms = 0, compute_ms = 0;
  int64_t host_reads = 0;
  std::string text() const;
};
H200Estimate h200_estimate(const OpCounts& counts, double hbm_bytes, double flops);

// Bytes one decode step reads from HBM on a GPU in bf16: every weight once, and the KV cache of
// `rows` sequences at `context` positions.
double decode_step_bytes(const model::CausalLM& model, int64_t rows, int64_t context);
// FLOPs of one decode step: 2 per weight per row, plus attention's 4 x heads x head_dim x context.
double decode_step_flops(const model::CausalLM& model, int64_t rows, int64_t context);

}  // namespace rqat::bench
