// The MLP's activation, silu(gate) * up, as Hugging Face's LlamaMLP/Qwen2MLP/Qwen3MLP compute it.
// Where rqat has the fused path (ops/kernel_choice.h's swiglu: float32 CPU tensors), one call
// forward and one backward (ops/swiglu_kernel.h), which save the two inputs where the composite
// also saves silu(gate); elsewhere, and with --kernels reference, the composite (swiglu_ref).
// Without a gradient (evaluation, generation, rollouts) the composite runs whatever the kernel
// choice: inference results stay what they were, and there is no backward to save.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace rqat::ops {

// gate, up: one shape, dtype and device -> silu(gate) * up.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

// The twin: at::silu(gate) * up.
at::Tensor swiglu_ref(const at::Tensor& gate, const at::Tensor& up);

// The fused path itself, whatever the kernel choice (tests, self-checks, timing): float32 CPU
// tensors of one shape.
bool fused_swiglu_exists(const c10::Device& device);  // on this device type, in this build
bool fused_swiglu_supported(const at::Tensor& gate, const at::Tensor& up);
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

// The check's measure: max |fused - twin| over the largest |twin| entry, for the output and both
// gradients (float32: the 2-ulp exponential and a few roundings).
inline constexpr double kSwigluTolerance = 1e-5;

}  // namespace rqat::ops
