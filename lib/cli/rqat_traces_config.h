// `rqat traces`'s configuration, declared once (io/options.h): eval-math samples.jsonl files turned
// into prompt/response training JSONL, teacher traces (data/teacher_traces.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "data/teacher_traces.h"
#include "io/options.h"

namespace rqat::cli {

struct TracesConfig {
  // Not checked for existence here: the library names a missing file in its usual one-line error.
  std::vector<std::string> samples;
  data::TraceOptions traces;    // out and the filters (the inputs: samples)
  int64_t max_per_problem = 0;  // 0: all

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    auto& t = self.traces;
    v.value(self.samples, "samples", "samples.jsonl files written by eval-math", Role::kSetting,
            {.required = true, .positional = true});
    v.value(t.out, "out", "Output traces JSONL (id, prompt, response, system, gold, source)",
            Role::kRunControl, {.required = true});
    v.value(t.include_incorrect, "all", "Keep incorrect samples too (default: correct ones only)");
    v.value(self.max_per_problem, "max-per-problem",
            "Keep at most N traces of each problem, the first in input order (0: all)");
    v.value(t.min_tokens, "min-tokens", "Drop completions of fewer generated tokens");
    v.value(t.drop_truncated, "drop-truncated",
            "Drop samples cut off at --max-new-tokens (finish_reason length); default on",
            Role::kSetting, {.negation = "keep-truncated"});
    v.value(t.dedupe, "dedupe", "Keep identical completions of a problem once; default on",
            Role::kSetting, {.negation = "no-dedupe"});
  }

  // Writes the traces and prints their summary to `out`.
  void run(std::ostream& out) const;
};

}  // namespace rqat::cli
