// `rqat report RUN_DIR [--plots]`'s configuration, declared once (io/options.h;
// docs/experiments.md): the run's results and stage tables as markdown (stdout and
// RUN_DIR/report.md) and CSV (report.csv, stages.csv). --plots then runs scripts/plot.py with a
// Python that has matplotlib and h5py (experiment/run_plots.h).
#pragma once

#include <iosfwd>
#include <string>

#include "io/options.h"

namespace rqat::cli {

struct RunReportConfig {
  // Not checked for existence here: the library names a bad run directory in its usual one-line
  // error.
  std::string run_dir;
  bool plots = false;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.run_dir, "run_dir", "Run directory of `rqat run` (with plan.json)", Role::kSetting,
            {.required = true, .positional = true});
    v.value(self.plots, "plots",
            "Also run scripts/plot.py RUN_DIR (PNG files in RUN_DIR/plots) with Debian's python3, "
            "the source tree's .venv or $RQAT_PLOT_PYTHON, the first with matplotlib and h5py");
  }

  void run(std::ostream& out) const;
};

}  // namespace rqat::cli
