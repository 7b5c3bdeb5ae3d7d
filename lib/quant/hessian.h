// The proxy Hessian of GPTQ for one linear layer: H = 2/n * sum over the n input rows (tokens) x
// of x x^T, accumulated batch by batch from forward hooks as a running average in float32 (as
// the reference implementations do), so its scale does not grow with the amount of calibration
// data. GPTQ is invariant to that scale (damping is relative to mean(diag H)).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace rqat::quant {

class HessianAccumulator {
 public:
  // H lives on `device` (inputs are moved there): the GPU when calibrating on one.
  explicit HessianAccumulator(int64_t in_features, c10::Device device = c10::kCPU);

  // x: (..., in_features), float32, bfloat16 or float16; every leading index is one sample.
  // Batches with no rows are ignored.
  void add(const at::Tensor& x);

  const at::Tensor& hessian() const { return h_; }  // (in, in) float32
  int64_t samples() const { return samples_; }      // rows (tokens) seen so far
  int64_t in_features() const { return in_features_; }

 private:
  int64_t in_features_;
  int64_t samples_ = 0;
  at::Tensor h_;
};

}  // namespace rqat::quant
