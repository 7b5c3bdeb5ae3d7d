// Flags of `rqat tiny-task` (the synthetic arithmetic task and tokenizer of experiments/tiny). Runs
// from its CLI11 callback like `rqat traces` (see traces_flags.h): errors print as one line.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/runtime_flags.h"
#include "data/tiny_task.h"

namespace rqat::cli {

inline void add_tiny_task_subcommand(CLI::App& app) {
  auto options = std::make_shared<data::TinyTaskOptions>();
  auto out = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("tiny-task",
                                 "Write the synthetic arithmetic word-problem task (train/test "
                                 "JSONL) and a BPE tokenizer for it");
  cmd->add_option("--out", *out, "Output directory")->required();
  cmd->add_option("--seed", options->seed, "Random seed")->capture_default_str();
  cmd->add_option("--train", options->train, "Training problems")->capture_default_str();
  cmd->add_option("--test", options->test, "Held-out problems")->capture_default_str();
  cmd->add_option("--levels", options->levels, "Difficulty levels 1..L (operations per problem)")
      ->capture_default_str();
  cmd->add_option("--max-start", options->arithmetic.max_start, "Largest starting number")
      ->capture_default_str();
  cmd->add_option("--max-change", options->arithmetic.max_change,
                  "Largest number added or taken away in one step")
      ->capture_default_str();
  cmd->add_option("--max-value", options->arithmetic.max_value,
                  "Largest intermediate result (no result goes below 0)")
      ->capture_default_str();
  cmd->add_option("--merges", options->merges, "BPE merges learned at most")->capture_default_str();
  cmd->add_option("--generic", options->generic,
                  "Also write generic.jsonl: N documents of the task's words without its "
                  "structure (the calibration-domain arm's generic text)")
      ->capture_default_str();
  cmd->callback([options, out] {
    const int code = run_tool("rqat", [&] {
      options->out_dir = *out;
      const auto metrics = data::write_tiny_task(*options);
      std::cout << "wrote " << *out << ": " << metrics["train"] << " train, " << metrics["test"]
                << " test problems, vocabulary " << metrics["vocab_size"] << ", mean "
                << metrics["train_tokens"]["mean_total_tokens"] << " (max "
                << metrics["train_tokens"]["max_total_tokens"] << ") tokens per chat document\n";
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
