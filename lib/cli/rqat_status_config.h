// `rqat status RUN_DIR [--watch [SECONDS]]`'s configuration, declared once (io/options.h;
// docs/experiments.md "Watching runs"): a table of every stage instance of a run, from the files
// stages replace atomically; with --watch, redrawn until nothing runs or waits.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "io/options.h"

namespace rqat::cli {

struct RunStatusConfig {
  std::string run_dir;
  std::optional<double> watch;  // seconds between redraws; unset: print the table once

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.run_dir, "run_dir", "Run directory (with plan.json)", Role::kSetting,
            {.required = true, .positional = true});
    v.value(self.watch, "watch", "Redraw every SECONDS (default 10) until no stage runs or waits",
            Role::kRunControl, {.implicit = "10"});
  }

  // terminal: `out` is a terminal, where --watch redraws the table in place.
  void run(std::ostream& out, bool terminal) const;
};

}  // namespace rqat::cli
