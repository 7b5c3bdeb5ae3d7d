// FakeQuantLinear on a floating-point grid (fake_quant_linear.h, quant/fp_grid_weight.h): the
// forward's weight, the learned scales and the export, computed with the operations of
// QuantizedWeight::dequantize so that the exported layer is the trained one bit for bit.
#include <ATen/ATen.h>

#include "io/error.h"
#include "ops/host_copy.h"
#include "quant/fake_quant_linear.h"
#include "quant/fp_grid_weight.h"
#include "quant/straight_through.h"

namespace rqat::quant {

namespace {

// Scale magnitudes rounded as the format stores them.
at::Tensor stored_scale(const at::Tensor& s, FpGrid grid) {
  switch (grid) {
    case FpGrid::kNvfp4:
      return round_to_e4m3(s);
    case FpGrid::kMxfp4:  // E8M0: 2^-127 .. 2^127
      return at::exp2(at::round(at::log2(s)).clamp(-127.0, 127.0));
    default:
      return s;
  }
}

// The element values of w (out, in) on the grid under effective scales s (out, in), and where the
// weight lies within the grid's range (the clipped straight-through estimator's mask); a scale of
// 0 holds only the value 0.
struct FpCodes {
  at::Tensor values, in_range;
};
FpCodes fp_values(const at::Tensor& w, const at::Tensor& s, FpGrid grid) {
  const auto positive = s > 0;
  const auto ratio = w / at::where(positive, s, at::ones_like(s));
  return {at::where(positive, fp_round(ratio, grid), at::zeros_like(ratio)),
          at::logical_and(positive, ratio.abs() <= fp_largest_value(grid))};
}

}  // namespace

void FakeQuantLinear::init_fp_grid() {
  // nvfp4's global scale beside the weight: the forward divides by it without a host copy.
  if (super_scales_.defined()) super_scales_ = super_scales_.to(weight_.device());
  if (options_.mode != ScaleMode::kLsq) return;
  // The log of each scale's ratio to its start: 0 at first, so the start is the ptq layer exactly
  // (exp(log(s)) need not be s, and fp8's FP32 scales would show it); a scale of 0 stays 0.
  log_scales_ = register_parameter("log_scale_ratios", at::zeros_like(scales_));
}

at::Tensor FakeQuantLinear::fp_grid_scales() const {
  if (options_.mode != ScaleMode::kLsq) return scales_;
  if (!at::isfinite(log_scales_.detach()).all().item<bool>())
    fail("{}: a learned scale is no longer finite (lower the learning rate)", options_.name);
  const auto s = scales_ * at::exp(log_scales_);
  return rounded_straight_through(s, stored_scale(s.detach(), *fp_grid_));
}

at::Tensor FakeQuantLinear::fake_quantized_weight_on_fp_grid() const {
  const auto dtype = weight_.scalar_type();
  const auto index = ops::on_device(g_idx_, weight_.device(), at::kLong);
  at::Tensor block_scales = fp_grid_scales();
  // nvfp4: the block's effective scale, scale / global, in float32 (as dequantize computes it).
  if (*fp_grid_ == FpGrid::kNvfp4)
    block_scales = block_scales / super_scales_.to(block_scales.device());
  const auto s = block_scales.index_select(1, index);
  const auto w = weight_.detach().to(at::kFloat);
  const FpCodes q = fp_values(w, s.detach(), *fp_grid_);
  const auto exact = (q.values * s.detach()).to(dtype);
  if (options_.mode != ScaleMode::kLsq) return straight_through(weight_, exact, q.in_range);
  // LSQ's gradients on a non-uniform grid: d w_q / d s = v - w / s inside the range, v (the
  // largest value, signed) where clamped; the weight's is the clipped straight-through one.
  const auto pass = q.in_range.to(at::kFloat);
  const auto safe_s = at::where(s.detach() > 0, s.detach(), at::ones_like(s));
  const auto surrogate =
      (s * (q.values - pass * (w / safe_s))).to(dtype) + pass.to(dtype) * weight_;
  return exact + (surrogate - surrogate.detach());
}

QuantizedWeight FakeQuantLinear::to_quantized_on_fp_grid() const {
  at::NoGradGuard no_grad;
  QuantizedWeight q;
  q.fp_grid = fp_grid_;
  q.bits = bits_;
  q.group_size = group_size_;
  q.scales = fp_grid_scales().detach().to(at::kFloat).contiguous().clone();
  q.zeros = at::zeros_like(q.scales);
  q.g_idx = g_idx_.clone();
  if (super_scales_.defined()) q.super_scales = super_scales_.clone().to(q.scales.device());
  const auto s = fp_effective_scales(q).index_select(1, g_idx_.to(at::kLong));
  q.codes =
      fp_value_codes(fp_values(weight_.detach().to(at::kFloat), s, *fp_grid_).values, *fp_grid_);
  q.validate(options_.name);
  return q;
}

}  // namespace rqat::quant
