// A Linear that shows its inputs to an observer before running the layer it wraps: the forward
// hook of calibration (GPTQ's Hessians, AWQ's activation statistics). Installed in a LinearSlot
// for one pass over the calibration data and removed afterwards (ScopedCapture).
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "model/layers.h"
#include "model/linear.h"

namespace rqat::quant {

class CapturingLinear : public model::WrappingLinear {
 public:
  using Observer = std::function<void(const at::Tensor& input)>;
  CapturingLinear(std::shared_ptr<model::Linear> inner, Observer observer)
      : WrappingLinear(std::move(inner)), observer_(std::move(observer)) {}

  at::Tensor forward(const at::Tensor& x) override {
    observer_(x);
    return inner_->forward(x);
  }

 private:
  Observer observer_;
};

// Wraps the layer of `slot` while alive; the original layer is back when it is destroyed. The
// slot's pointer is swapped directly (not re-registered as a submodule): the wrapper only lives
// for the duration of a calibration pass.
class ScopedCapture {
 public:
  ScopedCapture(const model::LinearSlot& slot, CapturingLinear::Observer observer)
      : slot_(slot.layer), original_(*slot.layer) {
    *slot_ = std::make_shared<CapturingLinear>(original_, std::move(observer));
  }
  ScopedCapture(const ScopedCapture&) = delete;
  ScopedCapture& operator=(const ScopedCapture&) = delete;
  ~ScopedCapture() { *slot_ = original_; }

 private:
  std::shared_ptr<model::Linear>* slot_;
  std::shared_ptr<model::Linear> original_;
};

}  // namespace rqat::quant
