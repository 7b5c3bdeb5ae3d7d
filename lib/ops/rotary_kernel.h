// The rotary position embedding's float32 CPU kernels, in Hugging Face's rotate-half layout with
// the sign folded into the sine (model/rotary.h): per row of D values, half = D / 2,
//   forward:   out[i] = x[i] cos[i] + x[i ^ half] signed_sin[i]
//   backward:  dx[i]  = dout[i] cos[i] + dout[i ^ half] signed_sin[i ^ half]
// where i ^ half stands for (i + half) mod D, the other half's partner. The composite (two
// products, a roll and a sum, and their backwards) makes about eight passes over q and k; these
// make one each way, and read x in the projection's (B, T, heads, D) order while writing the
// (B, heads, T, D) order attention reads, so its copy of q and k goes too. Every value is the
// composite's bit for bit: each product is rounded, then the sum (the file is compiled without
// contracting them into a fused multiply-add).
#pragma once

#include <cstdint>

namespace rqat::ops {

struct RotaryProblem {
  int64_t batch = 0, heads = 0, steps = 0, dim = 0;  // x (B, heads, T, D), D even
  // x's strides in floats (its last dimension is contiguous); the backward writes dx in them.
  int64_t x_batch_stride = 0, x_head_stride = 0, x_step_stride = 0;
  // cos and signed_sin: contiguous (B, T, D), or (1, T, D) shared by the batch (stride 0).
  int64_t angle_batch_stride = 0;
};

// out: (B, heads, T, D) contiguous.
void rotary_forward_cpu(const RotaryProblem& p, const float* x, const float* cos,
                        const float* signed_sin, float* out);

// dout: (B, heads, T, D) contiguous; dx in x's strides.
void rotary_backward_cpu(const RotaryProblem& p, const float* dout, const float* cos,
                         const float* signed_sin, float* dx);

}  // namespace rqat::ops
