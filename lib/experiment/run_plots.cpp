#include "experiment/run_plots.h"

#include "experiment/stage_process.h"
#include "io/error.h"

namespace rqat::experiment {

std::optional<std::filesystem::path> find_plot_script() {
  const auto script = (current_executable_dir() / "../../scripts/plot.py").lexically_normal();
  if (!std::filesystem::is_regular_file(script)) return std::nullopt;
  return script;
}

void run_plot_script(const std::filesystem::path& script, const std::filesystem::path& run_dir) {
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  // "--": a run directory that starts with "-" is still the positional argument.
  const int code = run_in_foreground({python, script.string(), "--", run_dir.string()});
  if (code != 0)
    fail("--plots: {} {} {} failed (exit code {})", python, script.string(), run_dir.string(),
         code);
}

}  // namespace rqat::experiment
