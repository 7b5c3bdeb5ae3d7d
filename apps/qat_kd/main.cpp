// qat-kd: quantization-aware training with distillation from a full-precision teacher
// (docs/qat.md). Flags only: the flags are cli/qat_config.h's, the work is lib/tools/qat_command.
#include "cli/qat_config.h"

int main(int argc, char** argv) {
  return rqat::cli::qat_tool_main(
      argc, argv, rqat::tools::QatObjective::kKd,
      "qat-kd: quantization-aware training with distillation from a full-precision teacher");
}
