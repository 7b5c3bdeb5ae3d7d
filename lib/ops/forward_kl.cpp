// See forward_kl.h.
#include "ops/forward_kl.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "io/error.h"
#include "ops/forward_kl_kernel.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"

namespace rqat::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The test hook (ops/kernel_choice.h): the divergence just over the check's tolerance.
at::Tensor with_fault_hook(at::Tensor kl, const at::Tensor& student, const at::Tensor& teacher,
                           double temperature) {
  if (!kernel_fault(Kernel::kForwardKl)) return kl;
  at::Tensor scale;
  {
    at::NoGradGuard no_grad;
    scale = forward_kl_error_scale(student, teacher, temperature).to(kl.scalar_type());
  }
  perturb_kernel_output(kl, kForwardKlTolerance, scale);
  return kl;
}

class ForwardKlFunction : public torch::autograd::Function<ForwardKlFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& student_in,
                            const at::Tensor& teacher_in, double temperature) {
    RQAT_MARK_KERNEL("rqat::forward_kl");
    const auto student = student_in.contiguous(), teacher = teacher_in.contiguous();
    const int64_t rows = student.size(0), vocab = student.size(1);
    auto kl = at::empty({rows}, student.options());
    auto student_lse = at::empty({rows}, student.options());
    auto teacher_lse = at::empty({rows}, student.options());
    forward_kl_rows_cpu(student.data_ptr<float>(), teacher.data_ptr<float>(), rows, vocab,
                        static_cast<float>(temperature), kl.data_ptr<float>(),
                        student_lse.data_ptr<float>(), teacher_lse.data_ptr<float>());
    ctx->save_for_backward({student, teacher, student_lse, teacher_lse});
    ctx->saved_data["temperature"] = temperature;
    return with_fault_hook(kl, student, teacher, temperature);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RQAT_MARK_KERNEL("rqat::forward_kl_backward");
    const auto saved = ctx->get_saved_variables();
    const auto &student = saved[0], &teacher = saved[1];
    const auto grad_kl = grads[0].contiguous();
    auto grad_student = at::empty_like(student);
    forward_kl_backward_cpu(student.data_ptr<float>(), teacher.data_ptr<float>(),
                            saved[2].data_ptr<float>(), saved[3].data_ptr<float>(),
                            grad_kl.data_ptr<float>(), student.size(0), student.size(1),
                            static_cast<float>(ctx->saved_data["temperature"].toDouble()),
                            grad_student.data_ptr<float>());
    return {grad_student, at::Tensor(), at::Tensor()};
  }
};

void check_operands(const at::Tensor& student, const at::Tensor& teacher, double temperature) {
  if (!student.defined() || !teacher.defined() || student.dim() != 2 ||
      teacher.sizes() != student.sizes())
    fail("forward_kl: expected student and teacher logits of one (rows, V) shape; got {} and {}",
         student.defined() ? c10::str(student.sizes()) : "undefined",
         teacher.defined() ? c10::str(teacher.sizes()) : "undefined");
  if (!(temperature > 0)) fail("forward_kl: the temperature must be > 0, got {}", temperature);
}

}  // namespace

bool fused_forward_kl_exists(const c10::Device& device) { return device.is_cpu(); }

bool fused_forward_kl_supported(const at::Tensor& student, const at::Tensor& teacher) {
  return student.is_cpu() && teacher.is_cpu() && student.scalar_type() == at::kFloat &&
         teacher.scalar_type() == at::kFloat && !teacher.requires_grad() && student.size(1) > 0;
}

at::Tensor fused_forward_kl(const at::Tensor& student, const at::Tensor& teacher,
                            double temperature) {
  check_operands(student, teacher, temperature);
  if (!fused_forward_kl_supported(student, teacher))
    fail(
        "forward_kl: the fused path takes float32 CPU logits and a teacher without gradient; got "
        "{} {} and {} {}",
        student.device().str(), c10::toString(student.scalar_type()), teacher.device().str(),
        c10::toString(teacher.scalar_type()));
  return ForwardKlFunction::apply(student, teacher, temperature);
}

at::Tensor forward_kl_ref(const at::Tensor& student, const at::Tensor& teacher,
                          double temperature) {
  check_operands(student, teacher, temperature);
  const at::Tensor log_q = (temperature == 1.0 ? student : student / temperature).log_softmax(-1);
  const at::Tensor log_p = (temperature == 1.0 ? teacher : teacher / temperature).log_softmax(-1);
  return (log_p.exp() * (log_p - log_q)).sum(-1);
}

at::Tensor forward_kl_error_scale(const at::Tensor& student, const at::Tensor& teacher,
                                  double temperature) {
  const at::Tensor log_q = (student.to(at::kDouble) / temperature).log_softmax(-1);
  const at::Tensor log_p = (teacher.to(at::kDouble) / temperature).log_softmax(-1);
  return (log_p.exp() * (log_p.abs() + log_q.abs())).sum(-1).clamp_min(1e-6);
}

at::Tensor forward_kl(const at::Tensor& student, const at::Tensor& teacher, double temperature) {
  check_operands(student, teacher, temperature);
  // (use_custom_kernel last: it counts the call as the kernel's.)
  if (fused_forward_kl_supported(student, teacher) &&
      use_custom_kernel(Kernel::kForwardKl, student.device()))
    return fused_forward_kl(student, teacher, temperature);
  return forward_kl_ref(student, teacher, temperature);
}

}  // namespace rqat::ops
