// RMSNorm as Hugging Face computes it: normalize in float32, cast back, then scale by the weight.
#pragma once

#include <ATen/Tensor.h>

namespace rqat::ops {

// x: (..., dim), weight: (dim) -> same shape and dtype as x
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace rqat::ops
