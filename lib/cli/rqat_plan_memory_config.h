// `rqat plan-memory`'s configuration (tools/plan_memory_command.h, docs/distributed.md "Memory
// plan"): the per-rank GPU memory of a training run from a config and the run's flags, which
// tools::PlanMemoryOptions declares spelt as the trainers spell them.
#pragma once

#include <ostream>

#include "io/options.h"
#include "tools/plan_memory_command.h"

namespace rqat::cli {

struct PlanMemoryConfig {
  tools::PlanMemoryOptions plan;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    io::section(v, "", self.plan);
  }

  // The plan on `out`; a warning that it needs more than --gpu-memory on `out` or `err`.
  void run(std::ostream& out, std::ostream& err) const {
    tools::run_plan_memory_command(plan, out, err);
  }
};

}  // namespace rqat::cli
