// eval-math: evaluates a model directory on a math reasoning benchmark (generation, answer
// extraction, grading, metrics), and `eval-math grade FILE` re-grades saved completions without a
// model. Flags only: they are cli/eval_config.h's, the work is in lib/tools/eval_run
// (docs/evaluation.md).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/eval_config.h"
#include "cli/runtime_flags.h"
#include "io/manifest.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{"eval-math: math reasoning benchmarks with answer extraction and grading"};
  rqat::cli::EvalConfig config;
  rqat::cli::add_config_flags(app, config);
  rqat::cli::GradeConfig grade;
  auto* grade_cmd = app.add_subcommand(
      "grade", "Re-grade saved completions: a JSONL with `completion` and `gold` on every line");
  rqat::cli::add_config_flags(*grade_cmd, grade);
  CLI11_PARSE(app, argc, argv);
  int stopped_by_signal = 0;
  const int code = rqat::cli::run_tool("eval-math", [&] {
    if (*grade_cmd) return grade.run(std::cout);
    stopped_by_signal = rqat::eval::run_evaluation(config.resolve(), std::cout).stopped_by_signal;
  });
  // Stopped by a signal with its finished samples on disk: 128 + the signal, as the trainers (the
  // SLURM script requeues on 138, SIGUSR1), and the next run continues.
  return code != 0 ? code : (stopped_by_signal != 0 ? 128 + stopped_by_signal : 0);
}
