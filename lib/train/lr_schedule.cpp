#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "io/error.h"

namespace rqat::train {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps)
    return peak_lr * static_cast<double>(warmup_from_zero ? step : step + 1) /
           static_cast<double>(warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps - 1);
  const double progress = std::clamp(
      static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  switch (decay) {
    case LrDecay::kConstant:
      return peak_lr;
    case LrDecay::kLinear:
      return peak_lr * (1.0 - (1.0 - min_lr_ratio) * progress);
    case LrDecay::kCosine:
      return peak_lr * (min_lr_ratio +
                        (1.0 - min_lr_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    case LrDecay::kCount:  // not a schedule
      break;
  }
  return peak_lr;
}

void LrSchedule::validate() const {
  if (!(peak_lr > 0) || !std::isfinite(peak_lr)) fail("--lr must be > 0, got {}", peak_lr);
  if (warmup_steps < 0) fail("--warmup-steps must be >= 0, got {}", warmup_steps);
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    fail("--min-lr-ratio must be in [0, 1], got {}", min_lr_ratio);
  if (total_steps < 1) fail("--steps must be >= 1, got {}", total_steps);
}

}  // namespace rqat::train
