// grpo: GRPO reinforcement learning for full-precision, quantization-aware and QLoRA policies
// (docs/grpo.md). Flags only: they are cli/grpo_config.h's, the work is lib/tools/grpo_command.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/grpo_config.h"
#include "cli/runtime_flags.h"
#include "io/manifest.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{
      "grpo: GRPO reinforcement learning for full-precision, quantization-aware and QLoRA "
      "policies"};
  rqat::cli::GrpoConfig config;
  rqat::cli::add_config_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  int exit_code = 0;
  const int status = rqat::cli::run_tool("grpo", [&] {
    exit_code = rqat::tools::run_grpo_command(config.resolve(), std::cout).exit_code;
  });
  return status != 0 ? status : exit_code;
}
