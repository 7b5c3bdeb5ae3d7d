// `rqat report --plots`: scripts/plot.py of the source tree draws a run's HDF5 metrics with the
// system python3 (matplotlib and h5py come from Debian, not the .venv).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace rqat::experiment {

// scripts/plot.py of the source tree this binary was built in (build/apps/rqat ->
// ../../scripts/plot.py); nullopt when it is not there (an installed or copied binary).
std::optional<std::filesystem::path> find_plot_script();

// Runs `PYTHON SCRIPT -- RUN_DIR` (no shell, so any run directory name passes through as is) with
// Debian's /usr/bin/python3, where scripts/setup installs matplotlib and h5py (the first python3 on
// PATH may be a virtual environment without them); rqat::Error when it does not exit 0.
void run_plot_script(const std::filesystem::path& script, const std::filesystem::path& run_dir);

}  // namespace rqat::experiment
