// Learning-rate schedules of the trainers: linear warmup, then constant, linear decay or cosine
// decay to min_lr_ratio * peak at the last step.
#pragma once

#include <cstdint>
#include <string>

#include "io/enum_names.h"

namespace rqat::train {

enum class LrDecay { kConstant, kLinear, kCosine, kCount };
constexpr EnumNames<LrDecay> enum_names(LrDecay) { return {"constant", "linear", "cosine"}; }

struct LrSchedule {
  double peak_lr = 1e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::kCosine;
  double min_lr_ratio = 0.0;  // the decay ends at min_lr_ratio * peak_lr
  // Hugging Face's warmup (get_*_schedule_with_warmup, hence TRL): peak * step / warmup_steps,
  // so update 0 has learning rate 0. A reproduction of a TRL run sets it (--warmup-from-zero).
  bool warmup_from_zero = false;

  // Learning rate of the update made at `step` (0-based). Warmup rises linearly as
  // peak * (step + 1) / warmup_steps, so the first update already moves the weights (a schedule
  // that starts at 0, as transformers' does, spends its first step on nothing; warmup_from_zero
  // gives that one: peak * step / warmup_steps). After warmup,
  // progress p = (step - warmup) / max(1, total - warmup - 1) runs from 0 to 1 at the last step:
  //   constant: peak;  linear: peak (1 - (1 - r) p);  cosine: peak (r + (1 - r)(1 + cos(pi p))/2).
  double at(int64_t step) const;

  // Throws naming the flag (--lr, --warmup-steps, --min-lr-ratio) when out of range.
  void validate() const;
};

}  // namespace rqat::train
