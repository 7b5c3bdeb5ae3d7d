// The GPU cost of one GRPO update, counted on the CPU at the dispatcher (bench/gpu_cost.h): kernel
// launches, host reads and the bytes they bring back, tensor moves, for grpo's own flags (the
// same as the grpo tool's; --out is a scratch directory, --steps, --epochs and --minibatches are
// set here). Prints the counts and, as an estimate, their launch-bound time on an H200; a
// "RESULT" line for scripts (scripts/bench_grpo runs it after its timing table).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "gpu_cost.h"

#include "cli/grpo_config.h"
#include "cli/runtime_flags.h"
#include "io/manifest.h"
#include "ops/kernel_choice.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{"rqat GRPO update benchmark: launches and host reads of one policy update"};
  rqat::cli::GrpoConfig config;
  rqat::cli::add_config_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("bench_grpo_update", [&] {
    const auto options = config.resolve();
    const auto cost = rqat::bench::grpo_update_cost(options);
    std::cout << fmt::format(
        "rqat grpo update ({} policy, {} prompts x {} samples, --kernels {}), counted at the "
        "dispatcher: {}\n  most launched: {}\n  estimate on an H200: {:.3f} ms launch-bound "
        "(launches x 4 us, eager)\n",
        rqat::enum_name(options.mode), options.prompts_per_step, options.num_generations,
        rqat::enum_name(rqat::ops::kernel_mode()), cost.summary(), cost.top_launches(),
        rqat::bench::h200_estimate(cost, 0, 0).launch_ms);
    std::cout << fmt::format("RESULT update_launches={} update_syncs={} update_host_bytes={}\n",
                             cost.launches, cost.syncs, cost.host_bytes);
  });
}
