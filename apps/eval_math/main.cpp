// eval-math: math reasoning benchmarks with answer extraction and grading.
// `eval-math grade FILE` re-grades saved completions without a model; the evaluation run itself
// (generation over a benchmark) arrives with the rest of issue 4.
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>

#include "cli/runtime_flags.h"
#include "eval/regrade.h"
#include "io/error.h"

int main(int argc, char** argv) {
  CLI::App app{"eval-math: math reasoning benchmarks with answer extraction and grading"};
  std::string model_dir, out_dir;
  app.add_option("--model", model_dir, "Model directory to evaluate (Hugging Face layout)");
  app.add_option("--out", out_dir, "Output directory of the evaluation");
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);

  std::string graded_file, graded_out;
  unsigned threads = 0;
  auto* grade_cmd = app.add_subcommand(
      "grade", "Re-grade saved completions: a JSONL with `completion` and `gold` on every line");
  grade_cmd->add_option("file", graded_file, "Per-sample JSONL")
      ->required()
      ->check(CLI::ExistingFile);
  grade_cmd->add_option(
      "--out", graded_out,
      "Where to write each line with `extracted` and `correct` (default: FILE.graded.jsonl)");
  grade_cmd->add_option("--threads", threads, "Grading threads (0: all cores)")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("eval-math", [&] {
    if (*grade_cmd) {
      const std::filesystem::path out = graded_out.empty()
                                            ? rqat::eval::default_regrade_output(graded_file)
                                            : std::filesystem::path(graded_out);
      const auto summary = rqat::eval::regrade_file(graded_file, out, {}, threads);
      std::cout << rqat::eval::format_regrade_summary(summary) << "wrote " << out.string() << "\n";
      return;
    }
    if (model_dir.empty()) rqat::fail("--model is required (or use `eval-math grade FILE`)");
    rqat::fail(
        "eval-math: evaluating a model is not implemented yet (issue 4); `eval-math grade` works");
  });
}
