// See rqat_traces_config.h.
#include "cli/rqat_traces_config.h"

#include <ostream>

#include "cli/rqat_flag_checks.h"

namespace rqat::cli {

void TracesConfig::run(std::ostream& out) const {
  require_at_least("--max-per-problem", max_per_problem, int64_t{0});
  require_at_least("--min-tokens", traces.min_tokens, int64_t{0});
  data::TraceOptions o = traces;
  o.inputs.assign(samples.begin(), samples.end());
  if (max_per_problem > 0) o.max_per_problem = max_per_problem;
  const auto summary = data::write_teacher_traces(o);
  out << data::format_trace_summary(summary, o) << "\n";
}

}  // namespace rqat::cli
