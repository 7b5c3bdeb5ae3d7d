// See rqat_report_config.h.
#include "cli/rqat_report_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <ostream>

#include "experiment/run_plots.h"
#include "experiment/run_report.h"

namespace rqat::cli {

void RunReportConfig::run(std::ostream& out) const {
  const auto report = experiment::collect_run_report(run_dir);
  experiment::write_report_files(report);
  out << experiment::report_markdown(report);
  const std::filesystem::path dir = run_dir;
  out << fmt::format("\nwrote {}, {} and {}\n", (dir / "report.md").string(),
                     (dir / "report.csv").string(), (dir / "stages.csv").string());
  if (!plots) return;
  out.flush();  // before the child's output
  if (const auto script = experiment::find_plot_script()) {
    experiment::run_plot_script(*script, run_dir);
  } else {
    out << fmt::format(
        "--plots: scripts/plot.py is not next to this binary; run: python3 scripts/plot.py {}\n",
        run_dir);
  }
}

}  // namespace rqat::cli
