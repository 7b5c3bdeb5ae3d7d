// `rqat report --plots`: scripts/plot.py of the source tree draws a run's HDF5 metrics with a
// Python that has matplotlib and h5py (plot_python).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace rqat::experiment {

// scripts/plot.py of the source tree this binary was built in (build/apps/rqat ->
// ../../scripts/plot.py); nullopt when it is not there (an installed or copied binary).
std::optional<std::filesystem::path> find_plot_script();

// The Python that draws: $RQAT_PLOT_PYTHON when set; else the first of Debian's /usr/bin/python3
// (where scripts/setup installs python3-matplotlib and python3-h5py; the first python3 on PATH may
// be a virtual environment without them) and the source tree's .venv (where `scripts/setup
// --bundle` installs them, with no Debian packages) that imports both; rqat::Error naming the
// candidates when none does.
std::string plot_python(const std::filesystem::path& script);

// Runs `PYTHON SCRIPT -- RUN_DIR` (no shell, so any run directory name passes through as is) with
// plot_python(SCRIPT); rqat::Error when it does not exit 0.
void run_plot_script(const std::filesystem::path& script, const std::filesystem::path& run_dir);

}  // namespace rqat::experiment
