// See rotary.h.
#include "ops/rotary.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>

#include "io/error.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"
#include "ops/rotary_kernel.h"

namespace rqat::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// x as the kernels read it: a contiguous last dimension, and no element in two places (the
// backward writes dx in x's strides).
at::Tensor rows_contiguous(const at::Tensor& x) {
  return x.stride(-1) == 1 && x.is_non_overlapping_and_dense() ? x : x.contiguous();
}

RotaryProblem problem_of(const at::Tensor& x, const at::Tensor& cos) {
  RotaryProblem p;
  p.batch = x.size(0);
  p.heads = x.size(1);
  p.steps = x.size(2);
  p.dim = x.size(3);
  p.x_batch_stride = x.stride(0);
  p.x_head_stride = x.stride(1);
  p.x_step_stride = x.stride(2);
  p.angle_batch_stride = cos.size(0) == 1 ? 0 : p.steps * p.dim;
  return p;
}

// The forward kernel on x as the kernels read it (rows_contiguous), with or without autograd.
at::Tensor forward_on_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  RQAT_MARK_KERNEL("rqat::rotary_forward");
  auto out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  rotary_forward_cpu(problem_of(x, cos), x.data_ptr<float>(), cos.data_ptr<float>(),
                     sin.data_ptr<float>(), out.data_ptr<float>());
  return perturbed_if_faulty(Kernel::kRotary, out, kRotaryTolerance);
}

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos,
                            const at::Tensor& sin) {
    const auto x = rows_contiguous(x_in);
    // The backward writes dx in x's strides: for the projection's (B, T, heads, D) order seen
    // as (B, heads, T, D), the transpose and view back to the projection's output are free.
    ctx->saved_data["x_strides"] = x.strides().vec();
    ctx->save_for_backward({cos, sin});
    return forward_on_cpu(x, cos, sin);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RQAT_MARK_KERNEL("rqat::rotary_backward");
    const auto saved = ctx->get_saved_variables();
    const auto &cos = saved[0], &sin = saved[1];
    const auto grad = grads[0].contiguous();
    const auto strides = ctx->saved_data["x_strides"].toIntVector();
    auto dx = at::empty_strided(grad.sizes(), strides, grad.options());
    auto p = problem_of(dx, cos);
    rotary_backward_cpu(p, grad.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                        dx.data_ptr<float>());
    return {dx, at::Tensor(), at::Tensor()};
  }
};

void check_shapes(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool ok = x.defined() && cos.defined() && sin.defined() && x.dim() == 4 && x.size(3) > 0 &&
                  x.size(3) % 2 == 0 && cos.dim() == 3 && cos.sizes() == sin.sizes() &&
                  (cos.size(0) == 1 || cos.size(0) == x.size(0)) && cos.size(1) == x.size(2) &&
                  cos.size(2) == x.size(3);
  if (!ok)
    fail(
        "rotary: expected x (B, heads, T, D) with D even and positive, and cos, sin (B or 1, "
        "T, D); got {}, {} and {}",
        x.defined() ? c10::str(x.sizes()) : "undefined",
        cos.defined() ? c10::str(cos.sizes()) : "undefined",
        sin.defined() ? c10::str(sin.sizes()) : "undefined");
}

}  // namespace

bool fused_rotary_exists(const c10::Device& device) { return device.is_cpu(); }

bool fused_rotary_supported(const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& signed_sin) {
  const auto cpu_float = [](const at::Tensor& t) {
    return t.is_cpu() && t.scalar_type() == at::kFloat;
  };
  // Angles with a gradient of their own take the composite, which has one.
  return cpu_float(x) && cpu_float(cos) && cpu_float(signed_sin) && !cos.requires_grad() &&
         !signed_sin.requires_grad();
}

at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  check_shapes(x, cos, signed_sin);
  if (!fused_rotary_supported(x, cos, signed_sin))
    fail(
        "rotary: the fused path takes float32 CPU tensors and angles without a gradient; got x "
        "{} {}, cos {} {}{}",
        x.device().str(), c10::toString(x.scalar_type()), cos.device().str(),
        c10::toString(cos.scalar_type()),
        cos.requires_grad() || signed_sin.requires_grad() ? " with a gradient" : "");
  const auto c = cos.contiguous(), s = signed_sin.contiguous();
  if (at::GradMode::is_enabled() && x.requires_grad()) return RotaryFunction::apply(x, c, s);
  return forward_on_cpu(rows_contiguous(x), c, s);
}

at::Tensor rotary_ref(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  check_shapes(x, cos, signed_sin);
  // Hugging Face's x * cos + cat(-x2, x1) * sin, as x * cos + cat(x2, x1) * cat(-sin1, sin2):
  // (-x2) * sin == x2 * (-sin) exactly, so the result is bit for bit the same, but one roll
  // replaces a negation and a concatenation, and its gradient is one roll back instead of two
  // zero-filled slice copies, a negation and two additions.
  return x * cos.unsqueeze(1) + x.roll(x.size(-1) / 2, -1) * signed_sin.unsqueeze(1);
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  // (use_custom_kernel last: it counts the call as the kernel's.)
  if (fused_rotary_supported(x, cos, signed_sin) && use_custom_kernel(Kernel::kRotary, x.device()))
    return fused_rotary(x, cos, signed_sin);
  return rotary_ref(x, cos, signed_sin);
}

}  // namespace rqat::ops
