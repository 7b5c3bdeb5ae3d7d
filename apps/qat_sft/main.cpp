// qat-sft: quantization-aware (or, with --bits 16, full-precision) supervised fine-tuning
// (docs/qat.md). Flags only; the work is in lib/train/qat_command.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/runtime_flags.h"
#include "cli/train_flags.h"
#include "io/manifest.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{"qat-sft: quantization-aware (or, with --bits 16, full-precision) supervised fine-tuning"};
  rqat::cli::QatFlags flags;
  rqat::cli::add_qat_flags(app, flags, rqat::train::QatObjective::kSft);
  CLI11_PARSE(app, argc, argv);
  int exit_code = 0;
  const int status = rqat::cli::run_tool("qat-sft", [&] {
    const auto options = flags.resolve(rqat::train::QatObjective::kSft);
    exit_code = rqat::train::run_qat_command(options, std::cout).exit_code;
  });
  return status != 0 ? status : exit_code;
}
