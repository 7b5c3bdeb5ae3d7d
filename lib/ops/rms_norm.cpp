// See rms_norm.h. The float32 accumulation matters in bf16: summing squares in bf16 loses ~3
// digits.
#include "ops/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>

#include "io/error.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"
#include "ops/rms_norm_kernel.h"

#if defined(RQAT_WITH_CUDA) && __has_include(<ATen/ops/_fused_rms_norm.h>)
#define RQAT_FUSED_RMS_NORM_CUDA 1
#endif

namespace rqat::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The test hook (ops/kernel_choice.h).
at::Tensor with_fault_hook(const at::Tensor& out) {
  return perturbed_if_faulty(Kernel::kRmsNorm, out, rms_norm_tolerance(out.scalar_type()));
}

// y = rms_norm(x) through the CPU forward loop (float32 CPU tensors), and 1/rms per row when
// `rstd` is given (the backward's input).
at::Tensor forward_on_cpu(const at::Tensor& x, const at::Tensor& weight, double eps,
                          at::Tensor* rstd) {
  const int64_t dim = x.size(-1), rows = dim == 0 ? 0 : x.numel() / dim;
  auto y = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (rstd != nullptr) *rstd = at::empty({rows}, x.options());
  rms_norm_forward_cpu(x.data_ptr<float>(), weight.data_ptr<float>(), static_cast<float>(eps), rows,
                       dim, y.data_ptr<float>(),
                       rstd != nullptr ? rstd->data_ptr<float>() : nullptr);
  return y;
}

// Forward and backward through rqat's CPU loops; saves x and r (rows floats) for the backward.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& weight_in, double eps) {
    RQAT_MARK_KERNEL("rqat::rms_norm_forward");
    const auto x = x_in.contiguous(), weight = weight_in.contiguous();
    at::Tensor rstd;
    auto y = forward_on_cpu(x, weight, eps, &rstd);
    ctx->save_for_backward({x, weight, rstd});
    return with_fault_hook(y);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RQAT_MARK_KERNEL("rqat::rms_norm_backward");
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const auto g = grads[0].contiguous();
    const int64_t dim = x.size(-1), rows = rstd.size(0);
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::empty_like(x);
    if (ctx->needs_input_grad(1)) dw = at::empty_like(weight);
    rms_norm_backward_cpu(g.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
                          rstd.data_ptr<float>(), rows, dim,
                          dx.defined() ? dx.data_ptr<float>() : nullptr,
                          dw.defined() ? dw.data_ptr<float>() : nullptr);
    return {dx, dw, at::Tensor()};
  }
};

void check_shapes(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.defined() || x.dim() < 1 || !weight.defined() || weight.dim() != 1 ||
      weight.size(0) != x.size(-1))
    fail("rms_norm: expected x (..., dim) and a weight of dim entries; got x {}, weight {}",
         x.defined() ? c10::str(x.sizes()) : "undefined",
         weight.defined() ? c10::str(weight.sizes()) : "undefined");
}

}  // namespace

double rms_norm_tolerance(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble ? 1e-5 : 1e-2;
}

bool fused_rms_norm_exists(const c10::Device& device) {
#ifdef RQAT_FUSED_RMS_NORM_CUDA
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

bool fused_rms_norm_supported(const at::Tensor& x, const at::Tensor& weight) {
  if (x.device() != weight.device() || x.scalar_type() != weight.scalar_type()) return false;
  if (x.is_cpu()) return x.scalar_type() == at::kFloat;
#ifdef RQAT_FUSED_RMS_NORM_CUDA
  return x.is_cuda() && c10::isFloatingType(x.scalar_type());
#else
  return false;
#endif
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_shapes(x, weight);
  if (!fused_rms_norm_supported(x, weight))
    fail("rms_norm: the fused path takes float32 CPU tensors{}; got {} {} and a {} {} weight",
#ifdef RQAT_FUSED_RMS_NORM_CUDA
         " or CUDA tensors of one float dtype",
#else
         "",
#endif
         x.device().str(), c10::toString(x.scalar_type()), weight.device().str(),
         c10::toString(weight.scalar_type()));
#ifdef RQAT_FUSED_RMS_NORM_CUDA
  if (x.is_cuda()) {
    RQAT_MARK_KERNEL("rqat::rms_norm_cuda");  // PyTorch's fused kernels (one launch each way)
    return with_fault_hook(std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps)));
  }
#endif
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor rms_norm_ref(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_shapes(x, weight);
  const auto input_dtype = x.scalar_type();
  auto x32 = x.to(at::kFloat);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  auto normed = (x32 * at::rsqrt(variance + eps)).to(input_dtype);
  return weight * normed;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!at::GradMode::is_enabled() && x.is_cpu() && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat && weight.is_cpu()) {
    check_shapes(x, weight);
    return forward_on_cpu(x.contiguous(), weight.contiguous(), eps, nullptr);
  }
  // (use_custom_kernel last: it counts the call as the kernel's.)
  if (fused_rms_norm_supported(x, weight) && use_custom_kernel(Kernel::kRmsNorm, x.device()))
    return fused_rms_norm(x, weight, eps);
  return rms_norm_ref(x, weight, eps);
}

}  // namespace rqat::ops
