#include "experiment/run_plots.h"

#include <cstdlib>
#include <vector>

#include "experiment/stage_process.h"
#include "io/error.h"

namespace rqat::experiment {

std::optional<std::filesystem::path> find_plot_script() {
  const auto script = (current_executable_dir() / "../../scripts/plot.py").lexically_normal();
  if (!std::filesystem::is_regular_file(script)) return std::nullopt;
  return script;
}

namespace {

bool imports_plot_modules(const std::string& python) {
  const auto probe = run_captured({python, "-c", "import matplotlib, h5py"});
  return probe.started && probe.exit_code == 0;
}

}  // namespace

std::string plot_python(const std::filesystem::path& script) {
  if (const char* chosen = std::getenv("RQAT_PLOT_PYTHON"); chosen != nullptr && *chosen != '\0')
    return chosen;
  // Debian's python3 (scripts/setup installs python3-matplotlib and python3-h5py), else the source
  // tree's .venv, where `scripts/setup --bundle` installs them when there is no Debian.
  std::vector<std::string> candidates;
  candidates.push_back(std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                   : "python3");
  const auto venv_python = (script.parent_path() / "../.venv/bin/python").lexically_normal();
  if (std::filesystem::exists(venv_python)) candidates.push_back(venv_python.string());
  for (const auto& python : candidates)
    if (imports_plot_modules(python)) return python;
  fail(
      "--plots: no Python with matplotlib and h5py ({}): apt-get install python3-matplotlib "
      "python3-h5py, or set RQAT_PLOT_PYTHON",
      display_command(candidates));
}

void run_plot_script(const std::filesystem::path& script, const std::filesystem::path& run_dir) {
  const std::string python = plot_python(script);
  // "--": a run directory that starts with "-" is still the positional argument.
  const int code = run_in_foreground({python, script.string(), "--", run_dir.string()});
  if (code != 0)
    fail("--plots: {} {} {} failed (exit code {})", python, script.string(), run_dir.string(),
         code);
}

}  // namespace rqat::experiment
