// See rms_norm.h. The float32 accumulation matters in bf16: summing squares in bf16 loses ~3
// digits.
#include "ops/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace rqat::ops {

namespace {

// One pass per row over a float32 CPU tensor. Used where no gradient is needed: in a decode step
// the six ATen calls of the composite below cost more than the arithmetic itself.
at::Tensor rms_norm_inference_f32(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto input = x.contiguous();
  auto w = weight.contiguous();
  auto out = at::empty_like(input);
  const int64_t dim = input.size(-1), rows = input.numel() / dim;
  const float* src = input.data_ptr<float>();
  const float* scale = w.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, /*grain_size=*/64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = src + r * dim;
      float sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += row[i] * row[i];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + static_cast<float>(eps));
      for (int64_t i = 0; i < dim; ++i) dst[r * dim + i] = scale[i] * (row[i] * inv);
    }
  });
  return out;
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  if (!at::GradMode::is_enabled() && x.is_cpu() && input_dtype == at::kFloat &&
      weight.scalar_type() == at::kFloat) {
    return rms_norm_inference_f32(x, weight, eps);
  }
  auto x32 = x.to(at::kFloat);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  auto normed = (x32 * at::rsqrt(variance + eps)).to(input_dtype);
  return weight * normed;
}

}  // namespace rqat::ops
