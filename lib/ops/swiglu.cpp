// See swiglu.h.
#include "ops/swiglu.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>

#include "io/error.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"
#include "ops/swiglu_kernel.h"

namespace rqat::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

at::Tensor forward_on_cpu(const at::Tensor& gate, const at::Tensor& up) {
  auto out = at::empty_like(gate, at::MemoryFormat::Contiguous);
  swiglu_forward_cpu(gate.data_ptr<float>(), up.data_ptr<float>(), gate.numel(),
                     out.data_ptr<float>());
  return out;
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in,
                            const at::Tensor& up_in) {
    RQAT_MARK_KERNEL("rqat::swiglu_forward");
    const auto gate = gate_in.contiguous(), up = up_in.contiguous();
    ctx->save_for_backward({gate, up});
    return perturbed_if_faulty(Kernel::kSwiglu, forward_on_cpu(gate, up), kSwigluTolerance);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RQAT_MARK_KERNEL("rqat::swiglu_backward");
    const auto saved = ctx->get_saved_variables();
    const auto &gate = saved[0], &up = saved[1];
    const auto grad = grads[0].contiguous();
    at::Tensor grad_gate, grad_up;
    if (ctx->needs_input_grad(0)) grad_gate = at::empty_like(gate);
    if (ctx->needs_input_grad(1)) grad_up = at::empty_like(up);
    swiglu_backward_cpu(grad.data_ptr<float>(), gate.data_ptr<float>(), up.data_ptr<float>(),
                        gate.numel(), grad_gate.defined() ? grad_gate.data_ptr<float>() : nullptr,
                        grad_up.defined() ? grad_up.data_ptr<float>() : nullptr);
    return {grad_gate, grad_up};
  }
};

void check_shapes(const at::Tensor& gate, const at::Tensor& up) {
  if (!gate.defined() || !up.defined() || gate.sizes() != up.sizes())
    fail("swiglu: expected gate and up of one shape; got {} and {}",
         gate.defined() ? c10::str(gate.sizes()) : "undefined",
         up.defined() ? c10::str(up.sizes()) : "undefined");
}

}  // namespace

bool fused_swiglu_exists(const c10::Device& device) { return device.is_cpu(); }

bool fused_swiglu_supported(const at::Tensor& gate, const at::Tensor& up) {
  return gate.is_cpu() && up.is_cpu() && gate.scalar_type() == at::kFloat &&
         up.scalar_type() == at::kFloat && gate.sizes() == up.sizes();
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  check_shapes(gate, up);
  if (!fused_swiglu_supported(gate, up))
    fail("swiglu: the fused path takes float32 CPU tensors; got {} {} and {} {}",
         gate.device().str(), c10::toString(gate.scalar_type()), up.device().str(),
         c10::toString(up.scalar_type()));
  return SwigluFunction::apply(gate, up);
}

at::Tensor swiglu_ref(const at::Tensor& gate, const at::Tensor& up) {
  check_shapes(gate, up);
  return at::silu(gate) * up;
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  // Inference keeps the composite: its results (evaluations, rollouts) stay bit for bit what they
  // were, and without a backward the fusion saves little.
  if (!at::GradMode::is_enabled()) return swiglu_ref(gate, up);
  // (use_custom_kernel last: it counts the call as the kernel's.)
  if (fused_swiglu_supported(gate, up) && use_custom_kernel(Kernel::kSwiglu, gate.device()))
    return fused_swiglu(gate, up);
  return swiglu_ref(gate, up);
}

}  // namespace rqat::ops
