// See fake_quant_linear.h. With frozen scales and zeros (no gradient wanted for them: the default
// of QAT) the forward and backward are the fused float32 kernels of ops/fake_quant_ste.h, one pass
// over the weight each; LSQ and learnable clipping, and float64 (finite-difference tests), use ATen
// composites that run on any device. Both backward paths recompute the codes from the saved inputs
// instead of saving masks, trading one extra elementwise pass for (out, in)-sized saved tensors.
#include "quant/fake_quant_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "io/error.h"
#include "ops/fake_quant_ste.h"
#include "ops/host_copy.h"
#include "ops/weight_formats.h"
#include "quant/activation_quant.h"
#include "quant/gguf/grid.h"
#include "quant/rtn.h"
#include "quant/straight_through.h"
#include "quant/uniform_quantizer.h"

namespace rqat::quant {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class FakeQuantFunction : public torch::autograd::Function<FakeQuantFunction> {
 public:
  // fused: use the frozen-scale kernels (the caller checked that no scale or zero gradient can be
  // asked for and that the kernels support w); index is then g_idx as given, else int64.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& scales,
                            const at::Tensor& zeros, const at::Tensor& index, int64_t max_code,
                            const c10::IValue& grad_scale, bool fused) {
    // The grad scale is a constant (no gradient of its own), kept out of the inputs: an input must
    // be a defined tensor, and making a tensor of ones at every forward cost a launch per layer.
    ctx->save_for_backward({w, scales, zeros, index});
    ctx->saved_data["grad_scale"] = grad_scale;
    ctx->saved_data["max_code"] = max_code;
    ctx->saved_data["fused"] = fused;
    // Same operations in the same order as quantize_to_codes + QuantizedWeight::dequantize (the
    // fused kernel equals them bit for bit), so that export reproduces this result exactly.
    if (fused) return ops::fake_quantize_ste_forward(w, scales, zeros, index, max_code);
    return ops::fake_quantize_ste_forward_ref(w, scales, zeros, index, max_code);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &w = saved[0], &scales = saved[1], &zeros = saved[2], &index = saved[3];
    const c10::IValue& grad_scale = ctx->saved_data["grad_scale"];
    const int64_t max_code = ctx->saved_data["max_code"].toInt();
    const at::Tensor& grad = grad_outputs[0];
    if (ctx->saved_data["fused"].toBool()) {
      tensor_list grads(7);  // one per argument of forward; only the weight's is defined
      if (ctx->needs_input_grad(0))
        grads[0] = ops::fake_quantize_ste_backward(grad, w, scales, zeros, index, max_code);
      return grads;
    }
    auto s = scales.index_select(1, index), z = zeros.index_select(1, index);
    auto v = w / s;
    auto rounded = at::round(v);
    auto code = rounded + z;  // before clamping
    auto below = code<0, above = code> max_code;
    auto inside = at::logical_not(at::logical_or(below, above));
    auto zero = at::zeros_like(grad);

    at::Tensor grad_w, grad_s, grad_z;
    if (ctx->needs_input_grad(0)) grad_w = at::where(inside, grad, zero);
    // Sums the per-element contributions of the columns of each group into (out, groups).
    auto per_group = [&](const at::Tensor& contribution, const at::Tensor& like) {
      auto sum = at::zeros_like(like).index_add_(1, index, contribution);
      return grad_scale.isTensor() ? sum * grad_scale.toTensor() : sum;
    };
    if (ctx->needs_input_grad(1)) {
      auto ds = at::where(inside, rounded - v, at::where(below, -z, max_code - z));
      grad_s = per_group(grad * ds, scales);
    }
    if (ctx->needs_input_grad(2)) grad_z = per_group(at::where(inside, zero, -grad * s), zeros);
    return {grad_w, grad_s, grad_z, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_bits(int bits, const std::string& name) {
  if (!ops::integer_bits_supported(bits))
    fail("{}: bits = {} (supported: {})", name, bits, ops::integer_bits_choices());
}

// The value of x rounded to fp16 (as a GGUF block stores it), the gradient straight through.
at::Tensor fp16_straight_through(const at::Tensor& x) {
  return rounded_straight_through(x, x.detach().to(at::kHalf).to(x.scalar_type()));
}

// Codes of w (out, in) on a GGUF grid, with the grid's scales and offsets expanded to (out, in),
// as grid_code computes them (a step of 0 takes the code of its only value), and where the
// unclamped code lay in range (the clipped straight-through estimator's mask).
struct GridCodes {
  at::Tensor codes, in_range;
};
GridCodes codes_on_grid(const at::Tensor& w, const at::Tensor& s, const at::Tensor& o,
                        bool min_form, double max_code) {
  const auto positive = s > 0;
  auto raw = min_form ? at::round((w + o) / s) : at::round(w / s) + o;
  raw = at::where(positive, raw, min_form ? at::zeros_like(o) : o);
  auto in_range = at::logical_and(positive, at::logical_and(raw >= 0, raw <= max_code));
  return {at::clamp(raw, 0, max_code), in_range};
}

}  // namespace

at::Tensor fake_quantize_ste(const at::Tensor& w, const at::Tensor& scales, const at::Tensor& zeros,
                             const at::Tensor& g_idx, int bits, const at::Tensor& grad_scale) {
  check_bits(bits, "fake_quantize_ste");
  if (w.dim() != 2 || !c10::isFloatingType(w.scalar_type()))
    fail("fake_quantize_ste: the weight must be a 2-D float tensor (out, in), got {} dims",
         w.dim());
  if (scales.dim() != 2 || scales.size(0) != w.size(0) || zeros.sizes() != scales.sizes())
    fail("fake_quantize_ste: scales and zeros must both be ({}, groups)", w.size(0));
  if (scales.scalar_type() != w.scalar_type() || zeros.scalar_type() != w.scalar_type())
    fail("fake_quantize_ste: scales and zeros must have the weight's dtype {}",
         c10::toString(w.scalar_type()));
  if (g_idx.dim() != 1 || g_idx.size(0) != w.size(1) ||
      (g_idx.scalar_type() != at::kInt && g_idx.scalar_type() != at::kLong))
    fail("fake_quantize_ste: g_idx must be an int32/int64 tensor of {} entries", w.size(1));
  // The fused kernels cover the frozen case only: they compute no scale or zero gradient.
  const bool scale_grad_possible =
      at::GradMode::is_enabled() && (scales.requires_grad() || zeros.requires_grad());
  // (ops::use_fused_fake_quant_ste last: it counts the call as one of the kernel's.)
  const bool fused = !scale_grad_possible && scales.device() == w.device() &&
                     zeros.device() == w.device() && ops::use_fused_fake_quant_ste(w);
  // No grad scale (None) is a scale of 1.
  const auto scale =
      grad_scale.defined() ? c10::IValue(grad_scale.to(scales.options())) : c10::IValue();
  // The kernels read int32 g_idx (the layer's buffer, no copy); index_select wants int64.
  auto index = ops::on_device(g_idx, w.device(), fused ? at::kInt : at::kLong);
  return FakeQuantFunction::apply(w, scales, zeros, index, (int64_t{1} << bits) - 1, scale, fused);
}

FakeQuantLinear::FakeQuantLinear(const at::Tensor& weight, const QuantizedWeight& quantized,
                                 const std::optional<at::Tensor>& bias, FakeQuantOptions options)
    : options_(std::move(options)), bits_(quantized.bits), group_size_(quantized.group_size) {
  const std::string& name = options_.name;
  quantized.validate(name);
  if (!weight.defined() || weight.dim() != 2 || !c10::isFloatingType(weight.scalar_type()))
    fail("{}: the weight must be a 2-D float tensor (out, in)", name);
  if (weight.sizes() != quantized.codes.sizes())
    fail("{}: weight shape {} does not match the quantized state's {}", name,
         c10::str(weight.sizes()), c10::str(quantized.codes.sizes()));
  if (!at::isfinite(weight).all().item<bool>())
    fail("{}: the weight holds NaN or infinite values", name);
  if (options_.mode == ScaleMode::kLearnableClip && !std::isfinite(options_.clip_init_logit))
    fail("{}: clip_init_logit must be finite", name);
  if (quantized.gguf_grid && options_.mode == ScaleMode::kLearnableClip)
    fail(
        "{}: --scale-mode {} is not available on the {} grid (its steps are fp16 values, not "
        "ranges: use frozen or lsq)",
        name, enum_name(options_.mode), gguf_grid_name(*quantized.gguf_grid));
  if (quantized.fp_grid && options_.mode == ScaleMode::kLearnableClip)
    fail(
        "{}: --scale-mode {} is not available on the {} grid (its scales are the format's, not "
        "ranges: use frozen or lsq)",
        name, enum_name(options_.mode), enum_name(*quantized.fp_grid));
  grid_ = quantized.gguf_grid;
  fp_grid_ = quantized.fp_grid;
  if (options_.activations)
    input_quantizer_.emplace(*options_.activations, name, weight.size(1),
                             quantized.input_global_scale);
  at::NoGradGuard no_grad;
  const auto device = weight.device();
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  weight_ = register_parameter("weight", weight.to(f32).clone());
  if (bias) {
    if (!bias->defined() || bias->dim() != 1 || bias->size(0) != weight.size(0) ||
        !c10::isFloatingType(bias->scalar_type()))
      fail("{}: the bias must be a float tensor of {} entries", name, weight.size(0));
    bias_ = register_parameter("bias", bias->to(f32).clone());
  }
  const bool lsq = options_.mode == ScaleMode::kLsq;
  const bool grid_lsq = grid_ && lsq;
  scales_ =
      register_parameter("scales", quantized.scales.to(f32).clone(), lsq && !grid_ && !fp_grid_);
  // On a grid, LSQ trains what the block format stores as fp16 (the header): a K-quant's
  // super-block scales, else each block's step and, in min form (q4_1), its min.
  const GgufGridInfo grid = grid_ ? gguf_grid_info(*grid_) : GgufGridInfo{};
  zeros_ =
      register_parameter("zeros", quantized.zeros.to(f32).clone(),
                         lsq && !fp_grid_ && (!grid_ || (grid.min_form && !grid.super_scales)));
  g_idx_ = register_buffer("g_idx", quantized.g_idx.to(device, at::kInt).clone());
  // The log of a magnitude (0 where it is 0: its multiplier is 0 there, so it never counts).
  const auto log_of = [](const at::Tensor& x) {
    return at::where(x > 0, at::log(at::where(x > 0, x, 1)), at::zeros_like(x));
  };
  if (grid_lsq && grid.super_scales) {
    const auto super = quantized.super_scales.to(f32);
    log_scales_ = register_parameter("log_super_scales", log_of(super.abs()));
    super_signs_ = register_buffer("super_signs", super.sign());
    // A sub-block's step (its magnitude: the zero form mirrors negative ones) and min over its
    // super-block's |d| and |dmin|: integers, exactly (fp16 d times an integer of <= 8 bits is
    // exact in float32, and so is the quotient).
    const int64_t subs = grid.block / group_size_;
    const auto per_group = [&](int part) {
      return super.select(2, part).abs().repeat_interleave(subs, 1);
    };
    const auto quotient = [](const at::Tensor& x, const at::Tensor& base) {
      return at::where(base > 0, x / at::where(base > 0, base, 1), at::zeros_like(x));
    };
    const auto step_multiplier = quotient(scales_.detach(), per_group(0));
    const auto min_multiplier =
        grid.min_form ? quotient(zeros_.detach(), per_group(1)) : at::zeros_like(step_multiplier);
    grid_multipliers_ =
        register_buffer("grid_multipliers", at::stack({step_multiplier, min_multiplier}, 2));
  } else if (grid_lsq) {
    log_scales_ = register_parameter("log_scales", log_of(scales_.detach()));
    const auto step_multiplier = (scales_.detach() != 0).to(at::kFloat);
    grid_multipliers_ = register_buffer(
        "grid_multipliers", at::stack({step_multiplier, at::ones_like(step_multiplier)}, 2));
  } else if (quantized.super_scales.defined()) {
    super_scales_ = quantized.super_scales.cpu().clone();
  }
  if (fp_grid_) init_fp_grid();
  if (options_.mode == ScaleMode::kLearnableClip) {
    clip_gamma_ =
        register_parameter("clip_gamma", at::full(scales_.sizes(), options_.clip_init_logit, f32));
    clip_beta_ =
        register_parameter("clip_beta", at::full(scales_.sizes(), options_.clip_init_logit, f32));
  }
}

std::shared_ptr<FakeQuantLinear> FakeQuantLinear::from_rtn(const at::Tensor& weight,
                                                           const QuantSpec& spec,
                                                           const std::optional<at::Tensor>& bias,
                                                           FakeQuantOptions options) {
  return std::make_shared<FakeQuantLinear>(weight, rtn_quantize(weight, spec), bias,
                                           std::move(options));
}

std::shared_ptr<FakeQuantLinear> FakeQuantLinear::from_quantized(
    const QuantizedWeight& quantized, const std::optional<at::Tensor>& bias,
    FakeQuantOptions options) {
  quantized.validate(options.name);
  return std::make_shared<FakeQuantLinear>(quantized.dequantize(), quantized, bias,
                                           std::move(options));
}

FakeQuantLinear::ScaleZero FakeQuantLinear::current_scale_zero() const {
  const double maxq = static_cast<double>(max_code());
  switch (options_.mode) {
    case ScaleMode::kFrozen:
      return {scales_, zeros_};
    case ScaleMode::kLsq: {
      // The forward uses integral zeros in [0, maxq] (so that export is exact); the gradient
      // reaches the continuous parameter straight through the rounding, but not where the clamp
      // holds it (it would drift further without changing the output).
      auto rounded = at::round(zeros_.detach());
      auto in_range = at::logical_and(rounded >= 0, rounded <= maxq);
      return {scales_, straight_through(zeros_, at::clamp(rounded, 0, maxq), in_range)};
    }
    case ScaleMode::kLearnableClip: {
      auto index = g_idx_.to(at::kLong).unsqueeze(0).expand(weight_.sizes());
      auto none = at::zeros(scales_.sizes(), weight_.options());
      // Per (row, group): max(w, 0) and min(w, 0), as RTN's range always holds 0.
      auto hi = at::sigmoid(clip_gamma_) * none.scatter_reduce(1, index, weight_, "amax");
      auto lo = at::sigmoid(clip_beta_) * none.scatter_reduce(1, index, weight_, "amin");
      // An empty range (an all-zero group, or both logits saturated low) uses [-1, 1] like RTN:
      // any positive scale represents zeros exactly.
      auto empty = (hi - lo) <= 0;
      hi = at::where(empty, at::ones_like(hi), hi);
      lo = at::where(empty, -at::ones_like(lo), lo);
      auto scale = (hi - lo) / maxq;
      auto zero = -lo / scale;
      auto rounded = at::clamp(at::round(zero.detach()), 0, maxq);
      return {scale, straight_through(zero, rounded, at::ones_like(rounded, at::kBool))};
    }
    case ScaleMode::kCount:  // not a mode
      break;
  }
  fail("{}: unknown scale mode", options_.name);
}

at::Tensor FakeQuantLinear::grad_scale() const {
  if (options_.mode == ScaleMode::kFrozen || !options_.lsq_grad_scale) return {};
  auto counts = at::bincount(g_idx_.to(at::kLong), {}, scales_.size(1)).to(at::kFloat);
  return at::rsqrt(at::clamp_min(counts, 1) * static_cast<double>(max_code()));
}

FakeQuantLinear::ScaleZero FakeQuantLinear::grid_scale_offset() const {
  if (!learns_on_grid()) return {scales_, zeros_};
  const GgufGridInfo info = gguf_grid_info(*grid_);
  const auto step_multiplier = grid_multipliers_.select(2, 0);
  const auto min_multiplier = grid_multipliers_.select(2, 1);
  at::Tensor steps, offsets;
  if (info.super_scales) {
    // LSQ's gradient scale counts the weights that share a learned value: a super-block's.
    const at::Tensor learned = at::exp(lsq_gradient_scale(log_scales_, info.block));
    const int64_t subs = info.block / group_size_;
    const auto fp16_super = [&](int part) {
      return fp16_straight_through(learned.select(2, part)).repeat_interleave(subs, 1);
    };
    steps = fp16_super(0) * step_multiplier;
    offsets = info.min_form ? fp16_super(1) * min_multiplier : zeros_;
  } else {
    steps = fp16_straight_through(at::exp(lsq_gradient_scale(log_scales_, group_size_))) *
            step_multiplier;
    offsets =
        info.min_form ? fp16_straight_through(lsq_gradient_scale(zeros_, group_size_)) : zeros_;
  }
  // A learned step that rounds to 0 in fp16 would collapse its sub-block's values. One host read.
  const auto live = step_multiplier != 0;
  const auto bad = at::logical_and(live, at::logical_not(steps.detach() > 0)).any() |
                   at::logical_not(at::isfinite(steps.detach())).any() |
                   at::logical_not(at::isfinite(offsets.detach())).any();
  if (bad.item<bool>())
    fail("{}: a learned {} step is no longer finite and > 0 in fp16 (lower the learning rate)",
         options_.name, gguf_grid_name(*grid_));
  return {steps, offsets};
}

at::Tensor FakeQuantLinear::learned_super_scales() const {
  at::NoGradGuard no_grad;
  return (at::exp(log_scales_).to(at::kHalf).to(at::kFloat) * super_signs_).cpu().contiguous();
}

at::Tensor FakeQuantLinear::lsq_gradient_scale(const at::Tensor& x, int64_t shared) const {
  if (!options_.lsq_grad_scale) return x;
  const double g = 1.0 / std::sqrt(static_cast<double>(shared) * static_cast<double>(max_code()));
  // Value exactly x; gradient times g.
  return x.detach() + (x * g - (x * g).detach());
}

at::Tensor FakeQuantLinear::fake_quantized_weight_on_grid() const {
  const auto dtype = weight_.scalar_type();
  const auto index = ops::on_device(g_idx_, weight_.device(), at::kLong);
  const ScaleZero grid = grid_scale_offset();
  const auto s = grid.scales.index_select(1, index).to(dtype);
  const auto o = grid.zeros.index_select(1, index).to(dtype);
  const bool min_form = gguf_grid_info(*grid_).min_form;
  const GridCodes q = codes_on_grid(weight_.detach(), s.detach(), o.detach(), min_form, max_code());
  const auto exact = grid_values(q.codes, s.detach(), o.detach(), min_form);
  if (!learns_on_grid()) return straight_through(weight_, exact, q.in_range);
  // The exact grid values, with the gradients of a surrogate: the clipped STE for the weight and
  // LSQ's for the step, d w_q / d s = q - z - w / s inside the range and q - z where clamped
  // (min form: q - (w + m) / s and q), and LSQ+'s for a min, 0 inside and -1 where clamped.
  const auto pass = q.in_range.to(dtype);
  const auto w = weight_.detach();
  const auto safe_s = at::where(s.detach() > 0, s.detach(), at::ones_like(s));
  const auto surrogate =
      min_form
          ? s * (q.codes - pass * ((w + o.detach()) / safe_s)) - o * (1 - pass) + pass * weight_
          : s * (q.codes - o.detach() - pass * (w / safe_s)) + pass * weight_;
  return exact + (surrogate - surrogate.detach());
}

at::Tensor FakeQuantLinear::fake_quantized_weight() const {
  if (grid_) return fake_quantized_weight_on_grid();
  if (fp_grid_) return fake_quantized_weight_on_fp_grid();
  if (options_.mode == ScaleMode::kLsq) {
    auto s = scales_.detach();
    if (!(s > 0).all().item<bool>() || !at::isfinite(s).all().item<bool>())
      fail("{}: a learned scale is no longer finite and > 0 (lower the learning rate)",
           options_.name);
  }
  const ScaleZero sz = current_scale_zero();
  // Sharded training computes with bf16 copies of the weight (and of trained scales) while frozen
  // scales stay float32: the grid follows the weight's dtype (a differentiable cast, so learned
  // scales still get their gradients).
  const auto dtype = weight_.scalar_type();
  return fake_quantize_ste(weight_, sz.scales.to(dtype), sz.zeros.to(dtype), g_idx_, bits_,
                           grad_scale());
}

at::Tensor FakeQuantLinear::forward(const at::Tensor& x) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != in_features())
    fail("{}: the input's last dimension must be in_features = {}", options_.name, in_features());
  if (!c10::isFloatingType(x.scalar_type()))
    fail("{}: the input must be a float tensor, got {}", options_.name,
         c10::toString(x.scalar_type()));
  auto w = fake_quantized_weight().to(x.scalar_type());
  const at::Tensor input = input_quantizer_ ? (*input_quantizer_)(x) : x;
  return bias_.defined() ? at::linear(input, w, bias_.to(x.scalar_type())) : at::linear(input, w);
}

at::Tensor FakeQuantLinear::effective_weight() const {
  at::NoGradGuard no_grad;
  return fake_quantized_weight();
}

std::optional<at::Tensor> FakeQuantLinear::bias() const {
  if (!bias_.defined()) return std::nullopt;
  return bias_;
}

QuantizedWeight FakeQuantLinear::to_quantized() const {
  QuantizedWeight q = quantized_weight();
  if (input_quantizer_ && input_quantizer_->input_global_scale().defined())
    q.input_global_scale = input_quantizer_->input_global_scale().cpu().clone();
  return q;
}

QuantizedWeight FakeQuantLinear::quantized_weight() const {
  at::NoGradGuard no_grad;
  if (!at::isfinite(weight_).all().item<bool>())
    fail("{}: the trained weight holds NaN or infinite values; cannot export", options_.name);
  if (fp_grid_) return to_quantized_on_fp_grid();
  QuantizedWeight q;
  if (grid_) {
    q.gguf_grid = grid_;
    const ScaleZero grid = grid_scale_offset();
    if (learns_on_grid() && super_signs_.defined())
      q.super_scales = learned_super_scales();
    else if (super_scales_.defined())
      q.super_scales = super_scales_.clone();
    q.scales = grid.scales.detach().contiguous().clone();
    q.zeros = grid.zeros.detach().contiguous().clone();
    q.g_idx = g_idx_.clone();
    const auto index = g_idx_.to(at::kLong);
    q.codes =
        codes_on_grid(weight_.detach(), q.scales.index_select(1, index),
                      q.zeros.index_select(1, index), gguf_grid_info(*grid_).min_form, max_code())
            .codes.to(at::kByte);
    q.bits = bits_;
    q.group_size = group_size_;
    q.validate(options_.name);
    return q;
  }
  const ScaleZero sz = current_scale_zero();
  q.scales = sz.scales.detach().contiguous().clone();
  q.zeros = sz.zeros.detach().contiguous().clone();
  q.g_idx = g_idx_.clone();
  q.codes = quantize_to_codes(weight_.detach(), q.scales, q.zeros, q.g_idx, bits_);
  q.bits = bits_;
  q.group_size = group_size_;
  q.validate(options_.name);
  return q;
}

}  // namespace rqat::quant
