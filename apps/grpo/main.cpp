// grpo: GRPO reinforcement learning for full-precision, quantization-aware and QLoRA policies
// Flags that every stage shares are declared now; the stage itself arrives with issue 7.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/runtime_flags.h"
#include "io/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "grpo: GRPO reinforcement learning for full-precision, quantization-aware and QLoRA "
      "policies"};
  std::string model_dir, out_dir;
  app.add_option("--model", model_dir, "Input model directory (Hugging Face layout)")->required();
  app.add_option("--out", out_dir, "Output artifact directory")->required();
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("grpo", [&] { rqat::fail("grpo is not implemented yet (issue 7)"); });
}
