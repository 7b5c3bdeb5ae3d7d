// See rqat_doctor_config.h.
#include "cli/rqat_doctor_config.h"

#include <ostream>

#include "cli/runtime_flags.h"
#include "tools/doctor_command.h"

namespace rqat::cli {

int DoctorConfig::run(std::ostream& out, std::ostream& err) const {
  RuntimeFlags runtime;
  runtime.device = device;
  tools::DoctorOptions options;
  options.device = runtime.resolved_device();
  options.report = report;
  options.timing = !no_timing;
  if (tools::run_doctor_command(options, out)) return 0;
  err << "rqat doctor: a check failed (see the report above)\n";
  return 1;
}

}  // namespace rqat::cli
