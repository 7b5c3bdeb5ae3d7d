// The first-use self-checks of ops/kernel_choice.h: each runs one custom kernel and its PyTorch
// twin on the device on a few awkward shapes (one position, block and group boundaries, GQA,
// act-order, odd group sizes, bf16 and float32) from a generator of its own (the process's random
// streams are not touched, so a run's numbers do not depend on whether a check ran), and compares
// them in the measure and within the tolerance the kernel's own test states. Each lives beside its
// kernel (<op>_self_check.cpp); rqat doctor runs them all and times kernel against twin.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <functional>
#include <string>

#include "ops/kernel_choice.h"

namespace rqat::ops {

KernelCheck check_fake_quant(const c10::Device& device);
KernelCheck check_fused_attention(const c10::Device& device);
KernelCheck check_paged_decode_attention(const c10::Device& device);
KernelCheck check_low_bit_matmul(const c10::Device& device);
KernelCheck check_token_sampling(const c10::Device& device);
KernelCheck check_rms_norm(const c10::Device& device);
KernelCheck check_forward_kl(const c10::Device& device);
KernelCheck check_swiglu(const c10::Device& device);
KernelCheck check_rotary(const c10::Device& device);

// The cases of one check. Each case computes the custom result and the twin's (`want`, usually in
// float64) and compares them: error = max |got - want| / scale over the elements (scale a tensor
// broadcastable to want, or undefined for 1), NaN equal to NaN and an infinity to itself.
class SelfCheckCases {
 public:
  // Runs `body` as case `name` (it calls compare or compare_exact); an exception from it fails
  // the check with its first line.
  void run(const std::string& name, const std::function<void()>& body);
  void compare(const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale,
               double tolerance);
  void compare_exact(const at::Tensor& got, const at::Tensor& want) {
    compare(got, want, at::Tensor(), 0);
  }
  // Integers (token ids) that must be equal: the error is how many differ.
  void compare_ids(const at::Tensor& got, const at::Tensor& want);
  KernelCheck finish();

 private:
  KernelCheck check_;
  std::string current_;
  double worst_ratio_ = -1;  // worst error / tolerance so far (a tolerance of 0: 0 or infinite)
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The guards every check runs under: no autograd recording (a check that needs gradients turns it
// on for itself), outside inference mode and autocast (a first use inside the engine's
// InferenceMode or a trainer's bf16 autocast must not change the dtypes the check compares).
class SelfCheckScope {
 public:
  SelfCheckScope();
  ~SelfCheckScope();
  SelfCheckScope(const SelfCheckScope&) = delete;
  SelfCheckScope& operator=(const SelfCheckScope&) = delete;

 private:
  struct Guards;
  Guards* guards_;
};

// Seeded inputs made on the CPU (from the check's own generator), then moved to `device`.
at::Tensor check_randn(at::IntArrayRef sizes, uint64_t seed, const c10::Device& device,
                       at::ScalarType dtype = at::kFloat);

}  // namespace rqat::ops
