// See hessian.h.
#include "quant/hessian.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "io/error.h"

namespace rqat::quant {

HessianAccumulator::HessianAccumulator(int64_t in_features, c10::Device device)
    : in_features_(in_features) {
  if (in_features < 1) fail("hessian: in_features = {} (must be positive)", in_features);
  h_ = at::zeros({in_features, in_features}, at::TensorOptions(device).dtype(at::kFloat));
}

void HessianAccumulator::add(const at::Tensor& x) {
  const auto dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    fail("hessian: inputs must be float32, bfloat16 or float16, got {}", c10::toString(dtype));
  if (x.dim() < 1 || x.size(-1) != in_features_)
    fail("hessian: inputs have {} features, the layer has {}", x.dim() < 1 ? 0 : x.size(-1),
         in_features_);
  at::NoGradGuard no_grad;  // hooks may see activations that require grad
  auto rows = x.reshape({-1, in_features_}).to(h_.device(), at::kFloat);
  const int64_t batch = rows.size(0);
  if (batch == 0) return;
  // Running average: H_new = n/(n+b) H_old + 2/(n+b) X^T X, i.e. 2/n_total sum x x^T throughout.
  const int64_t total = samples_ + batch;
  h_.addmm_(rows.t(), rows, static_cast<double>(samples_) / static_cast<double>(total),
            2.0 / static_cast<double>(total));
  samples_ = total;
}

}  // namespace rqat::quant
