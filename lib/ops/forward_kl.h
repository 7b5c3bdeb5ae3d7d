// The distillation loss's divergence per token, KL(softmax(teacher / T) || softmax(student / T))
// for each row of (rows, V) logits, with its gradient for the student (the teacher's logits are
// constants: no gradient reaches them). Where rqat has the fused path (ops/kernel_choice.h's
// forward_kl: float32 CPU tensors), one call forward and one backward
// (ops/forward_kl_kernel.h), which reads each logit a few times from cache instead of streaming
// the (rows, V) tensors through memory some fifteen times; elsewhere, and with --kernels
// reference, the composite of ATen operators (forward_kl_ref) under autograd.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace rqat::ops {

// student, teacher: (rows, V) logits of one dtype and device; temperature > 0 -> (rows).
at::Tensor forward_kl(const at::Tensor& student, const at::Tensor& teacher, double temperature);

// The twin: log_softmax of both scaled logits, p = exp(log p), sum_v p (log p - log q).
at::Tensor forward_kl_ref(const at::Tensor& student, const at::Tensor& teacher, double temperature);

// The fused path itself, whatever the kernel choice (tests, self-checks, timing): float32 CPU
// tensors whose teacher needs no gradient.
bool fused_forward_kl_exists(const c10::Device& device);  // on this device type, in this build
bool fused_forward_kl_supported(const at::Tensor& student, const at::Tensor& teacher);
at::Tensor fused_forward_kl(const at::Tensor& student, const at::Tensor& teacher,
                            double temperature);

// The check's measures, for the fused path against the twin computed in float64:
//  per row, |kl - kl_ref| / sum_v p_v (|log p_v| + |log q_v|) (the size of the terms whose float32
//  rounding the sum carries; never below 1e-6);
//  the student's gradient, max |error| / max |gradient_ref|;
// both within kForwardKlTolerance (a few ulp of float32 summed over a vocabulary, and the 2-ulp
// exponential).
inline constexpr double kForwardKlTolerance = 1e-5;
at::Tensor forward_kl_error_scale(const at::Tensor& student, const at::Tensor& teacher,
                                  double temperature);

}  // namespace rqat::ops
