// ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory
// Flags that every stage shares are declared now; the stage itself arrives with issue 5.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/runtime_flags.h"
#include "io/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory"};
  std::string model_dir, out_dir;
  app.add_option("--model", model_dir, "Input model directory (Hugging Face layout)")->required();
  app.add_option("--out", out_dir, "Output artifact directory")->required();
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("ptq", [&] { rqat::fail("ptq is not implemented yet (issue 5)"); });
}
