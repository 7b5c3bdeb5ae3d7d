// `rqat doctor`'s configuration, declared once (io/options.h; tools/doctor_command.h): the
// environment, every custom kernel's self-check and timing against its PyTorch twin, and an
// all-reduce, as a Markdown report. The subcommand exits 1 when a check fails.
#pragma once

#include <iosfwd>
#include <string>

#include "io/options.h"

namespace rqat::cli {

struct DoctorConfig {
  // As RuntimeFlags' --device (which resolves it), with its own help: the device checked.
  std::string device = "auto";
  std::string report;
  bool no_timing = false;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.device, "device",
            "Device to check: cpu, cuda, cuda:N or auto (the first GPU, else the CPU)");
    v.value(self.report, "out", "Also write the report to this Markdown file", Role::kRunControl);
    v.value(self.no_timing, "no-timing", "Skip timing the kernels against their twins");
  }

  // Prints the report to `out`; returns the exit status: 0 when every check passed, else 1 after
  // a line on `err` that says so.
  int run(std::ostream& out, std::ostream& err) const;
};

}  // namespace rqat::cli
