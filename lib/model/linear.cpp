// See linear.h.
#include "model/linear.h"

#include "io/error.h"

#include <ATen/ATen.h>

namespace rqat::model {

DenseLinear::DenseLinear(int64_t in_features, int64_t out_features, bool with_bias,
                         const at::TensorOptions& options) {
  weight_ = register_parameter("weight", at::empty({out_features, in_features}, options));
  if (with_bias) bias_ = register_parameter("bias", at::empty({out_features}, options));
}

at::Tensor DenseLinear::forward(const at::Tensor& x) {
  return bias_.defined() ? at::linear(x, weight_, bias_) : at::linear(x, weight_);
}

std::optional<at::Tensor> DenseLinear::bias() const {
  if (!bias_.defined()) return std::nullopt;
  return bias_;
}

void DenseLinear::assign_weight(const at::Tensor& weight) {
  if (!weight.sizes().equals(weight_.sizes()))
    fail("assign_weight: shape {} does not match the layer's {}", c10::str(weight.sizes()),
         c10::str(weight_.sizes()));
  at::NoGradGuard no_grad;
  weight_.copy_(weight);
}

void DenseLinear::assign_bias(const at::Tensor& bias) {
  if (!bias_.defined()) fail("assign_bias: the layer has no bias");
  if (!bias.sizes().equals(bias_.sizes()))
    fail("assign_bias: shape {} does not match the layer's {}", c10::str(bias.sizes()),
         c10::str(bias_.sizes()));
  at::NoGradGuard no_grad;
  bias_.copy_(bias);
}

}  // namespace rqat::model
