// RMSNorm as Hugging Face computes it: normalize in float32, cast back, then scale by the weight.
// One call a norm, forward and backward, where rqat has a fused path (ops/kernel_choice.h's
// rms_norm): float32 on the CPU, rqat's loops (ops/rms_norm_kernel.h) under an autograd function
// of their own; on CUDA, PyTorch's fused kernels (aten::_fused_rms_norm and its backward), which
// round once where the composite casts the normalized x back to the input dtype before scaling
// (the same value in float32; within an ulp of bf16/fp16). Elsewhere, and with --kernels
// reference, the composite of ATen operators (rms_norm_ref), whose autograd makes the backward:
// about six launches forward and fourteen backward a norm, which a training step pays per layer.
// Without a gradient on the CPU in float32 the forward loop runs whatever the kernel choice: it is
// the path inference always took (no launches to save there, and no result to check it against).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace rqat::ops {

// x: (..., dim), weight: (dim) -> same shape and dtype as x
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The twin: float32 composite of ATen operators (pow, mean, add, rsqrt, mul, cast, mul).
at::Tensor rms_norm_ref(const at::Tensor& x, const at::Tensor& weight, double eps);

// The fused path itself, whatever the kernel choice (tests, self-checks, timing): float32 CPU
// tensors, or (builds with CUDA) CUDA tensors of any float dtype with a weight of the same dtype.
bool fused_rms_norm_exists(const c10::Device& device);  // on this device type, in this build
bool fused_rms_norm_supported(const at::Tensor& x, const at::Tensor& weight);
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The check tolerance: max |fused - twin| over max |twin|, for outputs and gradients alike
// (float32: a few ulps of different summation orders; bf16/fp16: one rounding of the result).
double rms_norm_tolerance(at::ScalarType dtype);

}  // namespace rqat::ops
