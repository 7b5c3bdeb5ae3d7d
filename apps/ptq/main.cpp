// ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory into an artifact
// directory (docs/ptq.md). Flags only: they are cli/ptq_config.h's, the work is in lib/quant.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/option_flags.h"
#include "cli/ptq_config.h"
#include "io/manifest.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  rqat::cli::return_large_allocations_to_system();
  CLI::App app{"ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory"};
  rqat::cli::PtqConfig config;
  rqat::cli::add_config_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("ptq",
                             [&] { rqat::tools::run_ptq_command(config.resolve(), std::cout); });
}
