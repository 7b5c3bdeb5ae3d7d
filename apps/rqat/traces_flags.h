// Flags of `rqat traces` (eval-math samples.jsonl -> prompt/response training JSONL). Runs from its
// CLI11 callback like `rqat nll` (see nll_flags.h): errors are printed as one line by run_tool.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/runtime_flags.h"
#include "data/teacher_traces.h"

namespace rqat::cli {

inline void add_traces_subcommand(CLI::App& app) {
  struct State {
    data::TraceOptions options;
    std::vector<std::string> inputs;
    std::string out;
    int64_t max_per_problem = 0;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "traces",
      "Turn eval-math samples.jsonl files into prompt/response training JSONL (teacher traces)");
  // No CLI::ExistingFile: the library names a missing file in its usual one-line error.
  cmd->add_option("samples", s->inputs, "samples.jsonl files written by eval-math")->required();
  cmd->add_option("--out", s->out,
                  "Output traces JSONL (id, prompt, response, system, gold, source)")
      ->required();
  cmd->add_flag("--all", s->options.include_incorrect,
                "Keep incorrect samples too (default: correct ones only)");
  cmd->add_option("--max-per-problem", s->max_per_problem,
                  "Keep at most N traces of each problem, the first in input order (0: all)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--min-tokens", s->options.min_tokens,
                  "Drop completions of fewer generated tokens")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  cmd->add_flag("--drop-truncated,!--keep-truncated", s->options.drop_truncated,
                "Drop samples cut off at --max-new-tokens (finish_reason length); default on");
  cmd->add_flag("--dedupe,!--no-dedupe", s->options.dedupe,
                "Keep identical completions of a problem once; default on");

  cmd->callback([s] {
    const int code = run_tool("rqat", [&] {
      auto& o = s->options;
      o.inputs.assign(s->inputs.begin(), s->inputs.end());
      o.out = s->out;
      if (s->max_per_problem > 0) o.max_per_problem = s->max_per_problem;
      const auto summary = data::write_teacher_traces(o);
      std::cout << data::format_trace_summary(summary, o) << "\n";
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
