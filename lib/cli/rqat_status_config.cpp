// See rqat_status_config.h.
#include "cli/rqat_status_config.h"

#include <ostream>

#include "experiment/run_status.h"

namespace rqat::cli {

void RunStatusConfig::run(std::ostream& out, bool terminal) const {
  if (!watch) {
    out << experiment::format_run_status(experiment::collect_run_status(run_dir));
    return;
  }
  experiment::watch_run_status(run_dir, *watch > 0 ? *watch : 10.0, terminal, out);
}

}  // namespace rqat::cli
