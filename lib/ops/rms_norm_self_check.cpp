// The first-use self-check of the fused RMSNorm (ops/kernel_self_checks.h): the output and the
// gradients of x and the weight against rms_norm_ref in float64 from the same inputs, relative to
// the largest entry, within rms_norm_tolerance of the input dtype. Cases: one element, rows across
// a block of the backward's weight-gradient sums, the (B, T, heads, D) shape of Qwen3's q/k
// norms, wide rows with a frozen weight, an all-zero row and large magnitudes; on CUDA also bf16.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/kernel_self_checks.h"
#include "ops/rms_norm.h"
#include "ops/rms_norm_kernel.h"

namespace rqat::ops {

namespace {

struct RmsNormCase {
  const char* name;
  std::vector<int64_t> shape;
  bool frozen_weight;  // no gradient wanted for the weight
  double magnitude;
  bool zero_row;
  at::ScalarType dtype;
};

double largest(const at::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

KernelCheck check_rms_norm(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  std::vector<RmsNormCase> rms_cases = {
      {"one element", {1, 1}, false, 1, false, at::kFloat},
      {"rows across a weight-gradient block",
       {kRmsNormRowBlock + 1, 48},
       false,
       1,
       false,
       at::kFloat},
      {"q/k norm (B, T, heads, D)", {2, 5, 3, 16}, false, 2, false, at::kFloat},
      {"wide rows, frozen weight, a zero row", {9, 1024}, true, 1, true, at::kFloat},
      {"large values", {4, 3, 40}, false, 1e4, false, at::kFloat},
  };
  if (device.is_cuda())
    rms_cases.push_back({"bf16 rows", {6, 7, 96}, false, 1, true, at::kBFloat16});
  uint64_t seed = 0x5eed0006;
  for (const auto& c : rms_cases) {
    cases.run(c.name, [&] {
      at::AutoGradMode grad_mode(true);
      const int64_t dim = c.shape.back();
      auto x = (check_randn(c.shape, seed++, device) * c.magnitude).to(c.dtype);
      if (c.zero_row) x.view({-1, dim})[0].zero_();
      auto w = (1 + 0.2 * check_randn({dim}, seed++, device)).to(c.dtype);
      auto x64 = x.to(at::kDouble), w64 = w.to(at::kDouble);
      x.requires_grad_();
      x64.requires_grad_();
      if (!c.frozen_weight) {
        w.requires_grad_();
        w64.requires_grad_();
      }
      const double tolerance = rms_norm_tolerance(c.dtype);
      auto out = fused_rms_norm(x, w, 1e-6);
      auto ref = rms_norm_ref(x64, w64, 1e-6);
      cases.compare(out, ref, at::scalar_tensor(largest(ref)), tolerance);
      const auto dout = check_randn(out.sizes(), seed++, device).to(c.dtype);
      std::vector<at::Tensor> inputs{x}, ref_inputs{x64};
      if (!c.frozen_weight) {
        inputs.push_back(w);
        ref_inputs.push_back(w64);
      }
      const auto grads = torch::autograd::grad({out}, inputs, {dout});
      const auto ref_grads = torch::autograd::grad({ref}, ref_inputs, {dout.to(at::kDouble)});
      for (size_t i = 0; i < grads.size(); ++i)
        cases.compare(grads[i], ref_grads[i], at::scalar_tensor(largest(ref_grads[i])), tolerance);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
