// See rms_norm.h. The float32 accumulation matters in bf16: summing squares in bf16 loses ~3
// digits.
#include "ops/rms_norm.h"

#include <ATen/ATen.h>

namespace rqat::ops {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  auto x32 = x.to(at::kFloat);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  auto normed = (x32 * at::rsqrt(variance + eps)).to(input_dtype);
  return weight * normed;
}

}  // namespace rqat::ops
