// qat-sft: quantization-aware (or, with --bits 16, full-precision) supervised fine-tuning
// (docs/qat.md). Flags only: the flags are cli/qat_config.h's, the work is lib/tools/qat_command.
#include "cli/qat_config.h"

int main(int argc, char** argv) {
  return rqat::cli::qat_tool_main(
      argc, argv, rqat::tools::QatObjective::kSft,
      "qat-sft: quantization-aware (or, with --bits 16, full-precision) supervised fine-tuning");
}
