// `rqat tiny-task`'s configuration, declared once (io/options.h): the synthetic arithmetic task and
// tokenizer of experiments/tiny (data/tiny_task.h).
#pragma once

#include <iosfwd>

#include "data/tiny_task.h"
#include "io/options.h"

namespace rqat::cli {

struct TinyTaskConfig {
  data::TinyTaskOptions task;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    auto& t = self.task;
    v.value(t.out_dir, "out", "Output directory", Role::kRunControl, {.required = true});
    v.value(t.seed, "seed", "Random seed");
    v.value(t.train, "train", "Training problems");
    v.value(t.test, "test", "Held-out problems");
    v.value(t.levels, "levels", "Difficulty levels 1..L (operations per problem)");
    v.value(t.arithmetic.max_start, "max-start", "Largest starting number");
    v.value(t.arithmetic.max_change, "max-change",
            "Largest number added or taken away in one step");
    v.value(t.arithmetic.max_value, "max-value",
            "Largest intermediate result (no result goes below 0)");
    v.value(t.merges, "merges", "BPE merges learned at most");
    v.value(t.generic, "generic",
            "Also write generic.jsonl: N documents of the task's words without its structure (the "
            "calibration-domain arm's generic text)");
  }

  // Writes the task and says what it wrote on `out`.
  void run(std::ostream& out) const;
};

}  // namespace rqat::cli
