// SwiGLU's float32 CPU kernels, elementwise over n values of the gate g and the up projection u:
//   forward:   h = silu(g) u,  silu(g) = g sigmoid(g)
//   backward:  du = dh silu(g),  dg = dh u sigmoid(g) (1 + g (1 - sigmoid(g)))
// one pass each way, where the composite (silu, then a multiplication, and their backwards) makes
// five passes over (tokens, intermediate) tensors and keeps silu(g) alive for the backward. The
// sigmoid takes exp(-|g|) (ops/vector_exp.h), so no exponential overflows.
#pragma once

#include <cstdint>

namespace rqat::ops {

void swiglu_forward_cpu(const float* gate, const float* up, int64_t n, float* out);

// grad_gate or grad_up may be null (not wanted).
void swiglu_backward_cpu(const float* grad, const float* gate, const float* up, int64_t n,
                         float* grad_gate, float* grad_up);

}  // namespace rqat::ops
