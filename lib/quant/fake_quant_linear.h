// The fake-quantized linear layer of quantization-aware training (issue 6): a float32 master weight
// that every forward pass quantizes per group, with the conventions of QuantizedWeight,
//   q = clamp(round_half_even(w / s) + z, 0, maxq),  w_q = (q - z) * s,
// (s, z) taken per row from the group g_idx[c] of each input column c, float32 arithmetic. The
// backward pass is a custom autograd function:
//   weight: the "clipped" straight-through estimator, d w_q / d w = 1 where the unclamped code
//     round(w / s) + z lies in [0, maxq] and 0 where it is clamped: weights pushed outside the
//     representable range [(0 - z) s, (maxq - z) s] get no gradient, so they do not drift further
//     away while contributing nothing to the output (the usual choice of QAT codebases).
//   scale (LSQ, Esser et al. 2020): d w_q / d s = round(w / s) - w / s inside the range,
//     (0 - z) below it and (maxq - z) above it.
//   zero point (LSQ+, Bhalgat et al. 2020, with the offset written as -z s): 0 inside the range (z
//     cancels), -s where the code is clamped.
// to_quantized() rounds the current master weight with the current (s, z) using the same float32
// operations, so to_quantized().dequantize() equals the forward's w_q bit for bit: exporting the
// trained layer loses nothing.
// On a GGUF grid (QuantizedWeight::gguf_grid, quant/gguf/grid.h) the scales, zero points or mins
// start as llama.cpp's; the forward takes each weight's nearest code on the grid with the same
// clipped straight-through gradient, and to_quantized() exports those codes exactly. They stay
// frozen (kFrozen), or learn with the LSQ/LSQ+ gradients above (kLsq) in the only way the block
// format can store the result: what the format keeps as fp16 trains, rounded to fp16 in every
// forward (the rounding passes the gradient straight through), and what it keeps as integers stays:
//   q8_0, q4_0: the block's step d (parameter "log_scales"; its zero point is the type's);
//   q4_1: d and the min m ("zeros");
//   K-quants: the super-block scales d and dmin (parameter "log_super_scales", their signs in the
//     buffer "super_signs"), each sub-block's step and min staying d (dmin) times its own integer
//     (buffer "grid_multipliers"), so the steps of a super-block move together.
// A step is learned as the log of its magnitude: an optimizer step then changes it by a relative
// amount, which one learning rate can serve for llama.cpp's steps (1e-5..1e-2, a K-quant's d often
// 1e-4) and the weights alike, and it cannot turn negative. One that rounds to 0 in fp16 stops
// training with a message. "scales" and "zeros" keep the initial values where they do not train.
// On a floating-point grid (QuantizedWeight::fp_grid, quant/fp_grid_weight.h) the forward takes
// each weight's nearest element value (E2M1, E4M3) times its block's scale, with the clipped
// straight-through gradient (0 beyond the largest value, 6 or 448 steps). The block scales stay
// the format reference quantizer's (kFrozen) or learn with LSQ's gradient (kLsq) as the log of
// their ratio to the start ("log_scale_ratios"), rounded in every forward to what the format
// stores: an E4M3 value (nvfp4, under its fixed FP32 global scale), a power of two (mxfp4's E8M0)
// or any FP32 (fp8's per-row scale). A scale of 0 (nvfp4's all-zero block) stays 0.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "io/enum_names.h"
#include "model/linear.h"
#include "quant/activation_quant.h"
#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// Which quantization parameters train along with the weight.
enum class ScaleMode {
  kFrozen,  // scales and zeros fixed (default): only the weight (STE) and bias train
  kLsq,     // scales and zero points are parameters with the LSQ/LSQ+ gradients above
  // OmniQuant-style learnable weight clipping: per (row, group) logits gamma, beta set the range
  // [sigmoid(beta) min(w, 0), sigmoid(gamma) max(w, 0)] of the group's current weights, from
  // which s = range / maxq and z = round(-lo / s) follow as in RTN; gamma and beta train through
  // the LSQ gradients of s and z (z's rounding passes the gradient straight through).
  kLearnableClip,
  kCount,  // not a mode
};
constexpr EnumNames<ScaleMode> enum_names(ScaleMode) { return {"frozen", "lsq", "clip"}; }

struct FakeQuantOptions {
  ScaleMode mode = ScaleMode::kFrozen;
  // LSQ's gradient scale g = 1 / sqrt(N * maxq) on the scale and zero-point gradients, with N the
  // number of weights sharing that (scale, zero) (the columns of the group). LSQ recommends it so
  // that the step size learns at a rate comparable to the weights; off by default because AdamW
  // normalizes gradient magnitudes anyway. Used by kLsq and kLearnableClip.
  bool lsq_grad_scale = false;
  // Initial gamma and beta of kLearnableClip (OmniQuant initializes to 4: sigmoid(4) = 0.982).
  double clip_init_logit = 4.0;
  // Names the layer in error messages (e.g. "model.layers.0.mlp.up_proj").
  std::string name = "fake_quant_linear";
  // The input quantized too (QuantSpec::activations, quant/activation_quant.h), straight through;
  // nvfp4's input global scale comes with the QuantizedWeight, or from calibration.
  std::optional<FpGrid> activations;

  // The options a trainer's user picks (io/options.h); the clip init and the name are not flags.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.mode, "scale-mode",
            "frozen scales, lsq (learned scales and zeros) or clip (learned clipping)");
    v.value(self.lsq_grad_scale, "lsq-grad-scale",
            "Scale LSQ gradients by 1/sqrt(group size * max code)");
  }
};

// The autograd-aware quantize-dequantize of the header comment, usable on its own: w (out, in),
// scales and zeros (out, groups), all in one float dtype (the layer uses float32; tests use
// float64 for finite differences), g_idx (in) int32 or int64. zeros are used as given (the layer
// passes integral ones). grad_scale, when defined, multiplies the scale and zero gradients: a
// tensor broadcastable to (out, groups). Gradients flow to every input that requires grad.
at::Tensor fake_quantize_ste(const at::Tensor& w, const at::Tensor& scales, const at::Tensor& zeros,
                             const at::Tensor& g_idx, int bits,
                             const at::Tensor& grad_scale = at::Tensor());

class FakeQuantLinear : public model::Linear, public QuantizesInput {
 public:
  // weight (out, in): the master weight's initial value (the original full-precision weight, or
  // quantized.dequantize() to start exactly at the ptq result), any float dtype, stored as
  // float32 on its device. quantized: scales, zeros, g_idx, bits and group size (its codes only
  // fix the shape). bias: (out) or nullopt. Throws rqat::Error naming options.name on mismatch.
  FakeQuantLinear(const at::Tensor& weight, const QuantizedWeight& quantized,
                  const std::optional<at::Tensor>& bias = std::nullopt,
                  FakeQuantOptions options = {});
  // Scales and zeros by RTN of `weight` (spec: bits, group size, symmetric, clip search).
  static std::shared_ptr<FakeQuantLinear> from_rtn(
      const at::Tensor& weight, const QuantSpec& spec,
      const std::optional<at::Tensor>& bias = std::nullopt, FakeQuantOptions options = {});
  // Starts exactly at a ptq result (e.g. from quant_state.safetensors): weight = dequantize().
  static std::shared_ptr<FakeQuantLinear> from_quantized(
      const QuantizedWeight& quantized, const std::optional<at::Tensor>& bias = std::nullopt,
      FakeQuantOptions options = {});

  // x (..., in) of any float dtype -> (..., out) in x's dtype: x w_q^T + b.
  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return weight_.size(1); }
  int64_t out_features() const override { return weight_.size(0); }
  // w_q (float32, no autograd history).
  at::Tensor effective_weight() const override;
  std::optional<at::Tensor> bias() const override;

  // w_q with autograd history (what forward multiplies with), float32 (out, in).
  at::Tensor fake_quantized_weight() const;
  // Integer codes of the current weight under the current scales and zeros (zeros rounded to
  // integers in [0, maxq], as the forward uses them), and the input's global scale where it has
  // one. Throws if a scale is no longer > 0.
  QuantizedWeight to_quantized() const;
  // The input's quantizer (FakeQuantOptions::activations), nullptr without one.
  InputQuantizer* input_quantizer() override {
    return input_quantizer_ ? &*input_quantizer_ : nullptr;
  }

  // The master weight (parameter "weight"), float32 (out, in).
  const at::Tensor& weight() const { return weight_; }
  // Parameters "scales" and "zeros" (out, groups) float32, requires_grad only in kLsq. zeros may
  // hold non-integral values in kLsq; the forward uses clamp(round(zeros), 0, maxq). On a grid in
  // kLsq they keep the initial values, but for q4_1's mins ("zeros"), which train.
  const at::Tensor& scales() const { return scales_; }
  const at::Tensor& zeros() const { return zeros_; }
  const at::Tensor& g_idx() const { return g_idx_; }  // buffer "g_idx", int32 (in)
  // kLearnableClip only: parameters "clip_gamma" and "clip_beta" (out, groups); else undefined.
  const at::Tensor& clip_gamma() const { return clip_gamma_; }
  const at::Tensor& clip_beta() const { return clip_beta_; }
  int bits() const { return bits_; }
  int64_t group_size() const { return group_size_; }
  int64_t max_code() const { return (int64_t{1} << bits_) - 1; }
  const FakeQuantOptions& options() const { return options_; }

 private:
  struct ScaleZero {
    at::Tensor scales, zeros;  // (out, groups), zeros integral (on a grid: zero points or mins)
  };
  // The (s, z) the forward uses now, with autograd history to the trainable parameters.
  ScaleZero current_scale_zero() const;
  at::Tensor grad_scale() const;  // LSQ's g per group, or undefined
  // x with its gradient times LSQ's g = 1 / sqrt(shared * maxq) when lsq_grad_scale is on.
  at::Tensor lsq_gradient_scale(const at::Tensor& x, int64_t shared) const;
  // On a GGUF grid (quant/gguf/grid.h): the grid's values of the codes nearest the master weight,
  // with the clipped straight-through gradient (and LSQ's to the grid's fp16 scales in kLsq).
  at::Tensor fake_quantized_weight_on_grid() const;
  // The grid's steps and offsets (zero points or mins) per (row, sub-block) that the forward uses
  // now: the frozen ones, or in kLsq the fp16-rounded learned ones with autograd history.
  ScaleZero grid_scale_offset() const;
  // kLsq on a K-quant grid: the super-block scales as the block format stores them (signed fp16
  // d, dmin).
  at::Tensor learned_super_scales() const;
  bool learns_on_grid() const { return grid_.has_value() && options_.mode == ScaleMode::kLsq; }
  // On a floating-point grid (quant/fake_quant_fp_grid.cpp): the buffers and parameters, the
  // forward's weight and the export.
  void init_fp_grid();
  at::Tensor fake_quantized_weight_on_fp_grid() const;
  // The block scales as the format stores them: frozen, or learned and rounded onto the scale's
  // format (E4M3, a power of two, FP32) with the gradient straight through.
  at::Tensor fp_grid_scales() const;
  QuantizedWeight to_quantized_on_fp_grid() const;
  QuantizedWeight quantized_weight() const;  // to_quantized's weight part

  FakeQuantOptions options_;
  std::optional<InputQuantizer> input_quantizer_;
  int bits_;
  int64_t group_size_;
  at::Tensor weight_, bias_, scales_, zeros_, g_idx_, clip_gamma_, clip_beta_;
  std::optional<io::GgufType> grid_;  // a GGUF grid: zeros_ then hold mins for the min form
  std::optional<FpGrid> fp_grid_;     // a floating-point grid: super_scales_ holds nvfp4's global
  // Its fp16 super-block scales (K-quants), for export (frozen grids).
  at::Tensor super_scales_;
  // kLsq on a grid: the learned logs of the steps' magnitudes (out, groups), or of the K-quants'
  // |d| and |dmin| (out, blocks, 2) with super_signs_ their signs (0: a scale of 0, which stays).
  at::Tensor log_scales_, super_signs_;
  // kLsq on a grid: (out, groups, 2) what each sub-block's step and min are of the learned
  // super-block scale (K-quants: the format's integers), or for q8_0/q4_0/q4_1 1 (0 for a block
  // whose step is 0, which stays so).
  at::Tensor grid_multipliers_;
};

}  // namespace rqat::quant
