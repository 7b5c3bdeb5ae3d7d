// Flags of `rqat report RUN_DIR [--plots]` (docs/experiments.md): the run's results and stage
// tables as markdown (stdout and RUN_DIR/report.md) and CSV (report.csv, stages.csv). --plots then
// runs scripts/plot.py with a Python that has matplotlib and h5py (experiment/run_plots.h). Runs
// from its CLI11 callback like `rqat traces` (see traces_flags.h).
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/runtime_flags.h"
#include "experiment/run_plots.h"
#include "experiment/run_report.h"

namespace rqat::cli {

inline void add_report_subcommand(CLI::App& app) {
  struct State {
    std::string run_dir;
    bool plots = false;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "report",
      "Tables of a run (results per model and benchmark, stage status and metrics) as markdown and "
      "CSV; --plots draws its metrics with scripts/plot.py");
  // No CLI::ExistingDirectory: the library names a bad run directory in its usual one-line error.
  cmd->add_option("run_dir", s->run_dir, "Run directory of `rqat run` (with plan.json)")
      ->required();
  cmd->add_flag(
      "--plots", s->plots,
      "Also run scripts/plot.py RUN_DIR (PNG files in RUN_DIR/plots) with Debian's python3, the "
      "source tree's .venv or $RQAT_PLOT_PYTHON, the first with matplotlib and h5py");

  cmd->callback([s] {
    const int code = run_tool("rqat report", [&] {
      const auto report = experiment::collect_run_report(s->run_dir);
      experiment::write_report_files(report);
      std::cout << experiment::report_markdown(report);
      const std::filesystem::path dir = s->run_dir;
      std::cout << fmt::format("\nwrote {}, {} and {}\n", (dir / "report.md").string(),
                               (dir / "report.csv").string(), (dir / "stages.csv").string());
      if (!s->plots) return;
      std::cout.flush();  // before the child's output
      if (const auto script = experiment::find_plot_script()) {
        experiment::run_plot_script(*script, s->run_dir);
      } else {
        std::cout << fmt::format(
            "--plots: scripts/plot.py is not next to this binary; run: python3 scripts/plot.py "
            "{}\n",
            s->run_dir);
      }
    });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace rqat::cli
