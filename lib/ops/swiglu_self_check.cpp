// The first-use self-check of the fused SwiGLU (ops/kernel_self_checks.h): the output and the
// gradients of gate and up against swiglu_ref in float64 from the same inputs, relative to the
// largest entry, within kSwigluTolerance. Cases: one value, a tail shorter than a vector, a
// (B, T, intermediate) activation with a frozen up, and large gates (the sigmoid's saturation on
// both sides).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/kernel_self_checks.h"
#include "ops/swiglu.h"

namespace rqat::ops {

namespace {

struct SwigluCase {
  const char* name;
  std::vector<int64_t> shape;
  double magnitude;
  bool frozen_up;
};

double largest(const at::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

KernelCheck check_swiglu(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const std::vector<SwigluCase> swiglu_cases = {
      {"one value", {1}, 1, false},
      {"a tail inside a vector", {3, 37}, 2, false},
      {"(B, T, intermediate), frozen up", {2, 9, 688}, 1, true},
      {"large gates", {5, 64}, 30, false},
  };
  uint64_t seed = 0x5eed0008;
  for (const auto& c : swiglu_cases) {
    cases.run(c.name, [&] {
      at::AutoGradMode grad_mode(true);
      auto gate = check_randn(c.shape, seed++, device) * c.magnitude;
      auto up = check_randn(c.shape, seed++, device);
      auto gate64 = gate.to(at::kDouble).requires_grad_(), up64 = up.to(at::kDouble);
      gate.requires_grad_();
      std::vector<at::Tensor> inputs{gate}, ref_inputs{gate64};
      if (!c.frozen_up) {
        up.requires_grad_();
        up64.requires_grad_();
        inputs.push_back(up);
        ref_inputs.push_back(up64);
      }
      const auto out = fused_swiglu(gate, up);
      const auto ref = swiglu_ref(gate64, up64);
      cases.compare(out, ref, at::scalar_tensor(largest(ref)), kSwigluTolerance);
      const auto grad = check_randn(c.shape, seed++, device);
      const auto grads = torch::autograd::grad({out}, inputs, {grad});
      const auto ref_grads = torch::autograd::grad({ref}, ref_inputs, {grad.to(at::kDouble)});
      for (size_t i = 0; i < grads.size(); ++i)
        cases.compare(grads[i], ref_grads[i], at::scalar_tensor(largest(ref_grads[i])),
                      kSwigluTolerance);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
