// Straight-through estimators the fake quantizers share: a value computed without autograd
// history carrying the gradient of another tensor.
#pragma once

#include <ATen/ATen.h>

namespace rqat::quant {

// The value of `rounded` (no history) with the gradient of `x` passed straight through where
// `pass` holds. Written as rounded + (x - x.detach()) so that the value is exactly `rounded`.
inline at::Tensor straight_through(const at::Tensor& x, const at::Tensor& rounded,
                                   const at::Tensor& pass) {
  auto delta = x - x.detach();
  return rounded.detach() + at::where(pass, delta, at::zeros_like(delta));
}

// The value of `rounded` (x rounded as a format stores it) with x's gradient everywhere.
inline at::Tensor rounded_straight_through(const at::Tensor& x, const at::Tensor& rounded) {
  return rounded.detach() + (x - x.detach());
}

}  // namespace rqat::quant
