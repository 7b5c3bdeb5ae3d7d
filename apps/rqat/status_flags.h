// Flags of `rqat status RUN_DIR [--watch [SECONDS]]` (docs/experiments.md "Watching runs"): a
// table of every stage instance of a run, from the files stages replace atomically; with --watch,
// redrawn until nothing runs or waits. Runs from its CLI11 callback like `rqat report`.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/runtime_flags.h"
#include "experiment/run_status.h"

namespace rqat::cli {

inline void add_status_subcommand(CLI::App& app) {
  struct State {
    std::string run_dir;
    double watch = 0;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "status",
      "Where every stage instance of a run is (finished, running with step/ETA/latest numbers, "
      "failed with its error, waiting on what), while `rqat run` or SLURM jobs write it");
  cmd->add_option("run_dir", s->run_dir, "Run directory (with plan.json)")->required();
  cmd->add_option("--watch", s->watch,
                  "Redraw every SECONDS (default 10) until no stage runs or waits")
      ->expected(0, 1)
      ->default_str("10");

  cmd->callback([s, cmd] {
    const int code = run_tool("rqat status", [&] {
      if (cmd->count("--watch") == 0) {
        std::cout << experiment::format_run_status(experiment::collect_run_status(s->run_dir));
        return;
      }
      experiment::watch_run_status(s->run_dir, s->watch > 0 ? s->watch : 10.0,
                                   isatty(STDOUT_FILENO) != 0, std::cout);
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
