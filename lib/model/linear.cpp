// See linear.h.
#include "model/linear.h"

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

}  // namespace rqat::model
