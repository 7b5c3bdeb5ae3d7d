// The rotary position embedding applied to queries or keys: Hugging Face's
// x * cos + rotate_half(x) * sin, as x * cos + roll(x, D / 2) * signed_sin (the rotate-half sign
// folded into the sine, model/rotary.h). Where rqat has the fused path (ops/kernel_choice.h's
// rotary: float32 CPU tensors whose angles need no gradient), one call forward and one backward
// (ops/rotary_kernel.h), which return (B, heads, T, D) contiguous, the layout attention reads.
// Its values are the composite's bit for bit, so inference takes it too: evaluations and
// rollouts keep their results and lose four launches a projection. Elsewhere, and with --kernels
// reference, the composite (rotary_ref).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace rqat::ops {

// x: (B, heads, T, D) with D even, any strides; cos, signed_sin: (B, T, D) or (1, T, D).
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin);

// The twin: x * cos.unsqueeze(1) + x.roll(D / 2, -1) * signed_sin.unsqueeze(1).
at::Tensor rotary_ref(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin);

// The fused path itself, whatever the kernel choice (tests, self-checks, timing).
bool fused_rotary_exists(const c10::Device& device);  // on this device type, in this build
bool fused_rotary_supported(const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& signed_sin);
at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin);

// Bit for bit: the check and the tests compare exactly.
inline constexpr double kRotaryTolerance = 0;

}  // namespace rqat::ops
