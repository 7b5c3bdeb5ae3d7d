// qat-kd: quantization-aware training with distillation from a full-precision teacher
// Flags that every stage shares are declared now; the stage itself arrives with issue 6.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/runtime_flags.h"
#include "io/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "qat-kd: quantization-aware training with distillation from a full-precision teacher"};
  std::string model_dir, out_dir;
  app.add_option("--model", model_dir, "Input model directory (Hugging Face layout)")->required();
  app.add_option("--out", out_dir, "Output artifact directory")->required();
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("qat-kd",
                             [&] { rqat::fail("qat-kd is not implemented yet (issue 6)"); });
}
