// See attention.h. The autograd function saves its inputs, the output and the per-row log-sum-exp
// (B, heads, T) floats, the same as ATen's flash attention keeps, and no (T, S) probabilities.
#include "ops/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "io/error.h"
#include "ops/attention_kernel.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"

namespace rqat::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The problem for contiguous float32 q (B, heads, T, D), k (B, kv_heads, S, D) and a contiguous
// bool mask (B or 1, 1, T, S), or an empty tensor for none.
AttentionProblem problem_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask) {
  AttentionProblem p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.queries = q.size(2);
  p.dim = q.size(3);
  p.kv_heads = k.size(1);
  p.keys = k.size(2);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.dim)));
  if (mask.numel() > 0) {
    p.mask = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
    p.mask_batch = mask.size(0);
  }
  return p;
}

class FusedAttentionFunction : public torch::autograd::Function<FusedAttentionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const at::Tensor& mask_in) {
    RQAT_MARK_KERNEL("rqat::fused_attention_forward");
    const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const auto mask = mask_in.contiguous();  // no elements: no mask
    const auto p = problem_of(q, k, mask);
    auto out = at::empty_like(q);
    auto lse = at::empty({p.batch, p.heads, p.queries}, q.options());
    attention_forward_cpu(p, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                          out.data_ptr<float>(), lse.data_ptr<float>());
    ctx->save_for_backward({q, k, v, mask, out, lse});
    // Test hook (ops/kernel_choice.h): the output just over the test's 1e-5 of its largest entry
    // (the backward keeps the true output, so only the forward is off).
    return perturbed_if_faulty(Kernel::kFusedAttention, out, kFusedAttentionTolerance);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RQAT_MARK_KERNEL("rqat::fused_attention_backward");
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &mask = saved[3], &out = saved[4],
               &lse = saved[5];
    const auto dout = grads[0].contiguous();
    const auto p = problem_of(q, k, mask);
    auto dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
    attention_backward_cpu(p, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                           out.data_ptr<float>(), lse.data_ptr<float>(), dout.data_ptr<float>(),
                           dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
    return {dq, dk, dv, at::Tensor()};
  }
};

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask) {
  if (q.dim() != 4 || k.dim() != 4 || v.sizes() != k.sizes() || q.size(0) != k.size(0) ||
      q.size(3) != k.size(3) || k.size(1) == 0 || q.size(1) % k.size(1) != 0)
    fail(
        "attention: expected q (B, heads, T, D) and k, v (B, kv_heads, S, D) with heads a "
        "multiple of kv_heads; got q {}, k {}, v {}",
        c10::str(q.sizes()), c10::str(k.sizes()), c10::str(v.sizes()));
  if (mask.defined() &&
      (mask.dim() != 4 || (mask.size(0) != 1 && mask.size(0) != q.size(0)) || mask.size(1) != 1 ||
       mask.size(2) != q.size(2) || mask.size(3) != k.size(2)))
    fail("attention: the mask must be (B or 1, 1, T, S) = ({}, 1, {}, {}), got {}", q.size(0),
         q.size(2), k.size(2), c10::str(mask.sizes()));
}

}  // namespace

bool fused_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& mask) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->is_cpu() || t->scalar_type() != at::kFloat || t->dim() != 4) return false;
  }
  if (mask.defined() && (!mask.is_cpu() || mask.scalar_type() != at::kBool)) return false;
  return q.size(3) <= kFusedAttentionMaxDim && q.size(0) * k.size(1) >= at::get_num_threads();
}

bool fused_attention_faster_here() {
  static const bool faster = [] {
    if (const char* forced = std::getenv("RQAT_FUSED_ATTENTION"); forced && *forced)
      return std::string_view(forced) != "0";
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f") != 0;
#else
    return true;
#endif
  }();
  return faster;
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask) {
  check_shapes(q, k, v, mask);
  if (q.scalar_type() != at::kFloat || k.scalar_type() != at::kFloat ||
      v.scalar_type() != at::kFloat || !q.is_cpu() || !k.is_cpu() || !v.is_cpu())
    fail("attention: the fused kernels take float32 CPU tensors");
  if (mask.defined() && (mask.scalar_type() != at::kBool || !mask.is_cpu()))
    fail("attention: the fused kernels take a bool CPU mask");
  // Autograd functions take defined tensors: "no mask" travels as an empty one.
  return FusedAttentionFunction::apply(q, k, v, mask.defined() ? mask : at::empty({0}, at::kBool));
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask) {
  // The fused kernels where they take the operands and beat SDPA here (or are forced with
  // --kernels custom), once ops/kernel_choice.h has checked them on this CPU; else SDPA, the twin.
  if (fused_attention_supported(q, k, v, mask) &&
      (fused_attention_faster_here() || kernel_mode() == KernelMode::kCustom) &&
      use_custom_kernel(Kernel::kFusedAttention, q.device()))
    return fused_attention(q, k, v, mask);
  check_shapes(q, k, v, mask);
  return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, /*is_causal=*/false,
                                          /*scale=*/std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

at::Tensor attention_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask) {
  check_shapes(q, k, v, mask);
  const int64_t group = q.size(1) / k.size(1);
  const auto keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);
  auto scores = at::matmul(q.to(at::kFloat), keys.to(at::kFloat).transpose(-1, -2)) /
                std::sqrt(static_cast<double>(q.size(3)));
  if (mask.defined()) scores = scores.masked_fill(mask.logical_not(), -INFINITY);
  auto probs = at::softmax(scores, -1);
  // A row with no allowed key: softmax gives NaN; zeros instead, as the fused kernels give.
  if (mask.defined()) probs = probs.masked_fill(mask.logical_not().all(-1, true), 0.0);
  return at::matmul(probs, values.to(at::kFloat)).to(q.scalar_type());
}

}  // namespace rqat::ops
