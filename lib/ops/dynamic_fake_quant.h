// Dynamic per-tensor fake quantization of activations, as study A's rlquant train_model.py does to
// the output of every linear layer with a forward hook:
//   s = max|y| / qmax,  y_q = clamp(round_half_even(y / s), -qmax - 1, qmax) * s,
// qmax = 2^(bits-1) - 1 (127 at 8 bits), s taken afresh from each tensor it sees (the whole tensor:
// every batch row and position of one call), float32 arithmetic. An all-zero tensor stays zero.
//
// Two gradients, because the reference's is unusual:
//   kReference: autograd through the expression above, as PyTorch computes it for the hook: round
//     has a zero derivative, so the gradient reaches y only through s, i.e. only the element(s)
//     with the largest |y| get one: dL/dy_k = sign(y_k) / qmax * sum_i dL/dy_q,i * code_i (split
//     evenly among ties, as torch's max backward does), every other element gets 0. The
//     reference's gradient hook returns nothing, so it changes none of this.
//   kSte: the straight-through estimator, dL/dy = dL/dy_q (the clamp never binds: |y / s| <= qmax).
#pragma once

#include <ATen/Tensor.h>

#include "io/enum_names.h"

namespace rqat::ops {

enum class ActivationQuantGrad { kReference, kSte, kCount };
constexpr EnumNames<ActivationQuantGrad> enum_names(ActivationQuantGrad) {
  return {"reference", "ste"};
}

// y: any shape, float32 or bfloat16 (or float64 for gradient checks), any device: ATen operations
// only, so the CUDA path is the same code. bits in [2, 8]. Returns y_q in y's dtype.
at::Tensor fake_quantize_dynamic_per_tensor(const at::Tensor& y, int bits,
                                            ActivationQuantGrad grad);

// Plain loops over a CPU float tensor (forward only): the reference the op is tested against.
at::Tensor fake_quantize_dynamic_per_tensor_ref(const at::Tensor& y, int bits);

}  // namespace rqat::ops
