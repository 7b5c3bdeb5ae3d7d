// AWQ (Lin et al. 2023, "Activation-aware Weight Quantization"): before rounding, scale each input
// channel of a linear layer by s, folding 1/s into the operation that produces that input (an
// RMSNorm weight or the rows of the previous linear layer), so salient channels, those with large
// activations, lose less precision; then clip each group's range. As the reference code does it
// (llm-awq's auto_scale/auto_clip and AutoAWQ's defaults):
//
// Scale groups of a decoder block, and the output each one's search scores (block loss):
//   input_layernorm          -> q_proj, k_proj, v_proj   the attention module's output
//   v_proj                   -> o_proj (without GQA)     o_proj's output
//   post_attention_layernorm -> gate_proj, up_proj       the MLP's output
//   up_proj                  -> down_proj                down_proj's output
// Scales: s = x_mean^a / (w_mean^(1-a) + 1e-4) (duo scaling, AutoAWQ's default; x_mean = mean |x|
// per input channel, w_mean = mean over the group's rows of |w| / max|w| of its quantization
// group), or s = x_mean^a (activation, llm-awq), clamped at 1e-4 and normalized by sqrt(max s * min
// s); a on a grid of `grid` points in [0, 1) minimizing ||out(X) - out_q(X)||^2 on calibration
// inputs, out_q computed with Q(W s) / s in the group's layers. `loss: layer` scores the sum of the
// group's own layer outputs instead (rqat's earlier form, which needs no attention re-run).
// Clipping (auto_clip): after scaling, every quantized layer except q_proj and k_proj gets, per
// output row and quantization group, the range max|w| * (1 - i / clip_grid) for i < clip_grid *
// clip_max_shrink (1, 0.95, ..., 0.55) whose group output error, the mean over clip_tokens sampled
// tokens of (sum over the group's columns of x w - x Q(clamp(w)))^2, is smallest; the weights are
// clamped to +-that range. RTN (with --clip if asked) then rounds the layer.
// Folding is exact in real arithmetic: the block computes the same function before quantization.
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "io/enum_names.h"
#include "io/options.h"
#include "model/layers.h"
#include "quant/quant_spec.h"

namespace rqat::quant {

enum class AwqScaling { kDuo, kActivation, kCount };
constexpr EnumNames<AwqScaling> enum_names(AwqScaling) { return {"duo", "activation"}; }
enum class AwqLoss { kBlock, kLayer, kCount };
constexpr EnumNames<AwqLoss> enum_names(AwqLoss) { return {"block", "layer"}; }
enum class AwqClipping { kAuto, kNone, kCount };
constexpr EnumNames<AwqClipping> enum_names(AwqClipping) { return {"auto", "none"}; }

struct AwqOptions {
  int grid = 20;             // alpha in {0, 1/grid, ..., (grid-1)/grid}
  int64_t max_rows = 4096;   // calibration tokens kept per layer for the search
  bool scale_v_to_o = true;  // the v_proj -> o_proj group when shapes allow
  AwqScaling scaling = AwqScaling::kDuo;
  AwqLoss loss = AwqLoss::kBlock;
  AwqClipping clipping = AwqClipping::kAuto;
  int clip_grid = 20;
  double clip_max_shrink = 0.5;
  int64_t clip_tokens = 512;  // sampled calibration tokens scoring a clip range

  // The user's options, declared once (io/options.h); ptq offers them as --awq-*.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.grid, "grid", "AWQ: alpha grid points");
    v.value(self.scaling, "scaling", "AWQ scales: duo (AutoAWQ) or activation (llm-awq)");
    v.value(self.loss, "loss",
            "AWQ search scores the block's output (attention/MLP, the reference) or each layer's");
    v.value(self.clipping, "clipping", "AWQ auto_clip of each group's range (auto) or none");
  }
};

struct AwqGroupReport {
  std::string previous;             // e.g. "input_layernorm"
  std::vector<std::string> layers;  // e.g. {"self_attn.q_proj", ...}
  double alpha = 0;                 // chosen exponent
  double loss_identity = 0;         // search loss with s = 1 (plain RTN)
  double loss_best = 0;             // search loss with the chosen s
  at::Tensor scales;                // (in) float32: the chosen s (1/s folded into `previous`)
};

// Captured inputs of one block: per local layer name ("self_attn.q_proj", ...), the mean |x| of
// every input channel over all calibration tokens and a subsample of input rows (rows, in); and,
// for the attention module's loss, whole calibration sequences of the block's attention input
// (its input_layernorm output, (B, T, dim) each) with their contexts.
struct AwqBlockInputs {
  std::map<std::string, at::Tensor> channel_mean_abs;
  std::map<std::string, at::Tensor> rows;
  std::vector<at::Tensor> attention_inputs;
  std::vector<model::AttentionContext> attention_contexts;
  int64_t layer_index = 0;
};

// Searches and folds the scales of every group of `layer` whose layers `spec` quantizes
// (`layer_prefix` + local name is the full module name), then clips (options.clipping). Weights
// and norms change in place.
std::vector<AwqGroupReport> awq_scale_block(model::DecoderLayer& layer,
                                            const std::string& layer_prefix,
                                            const AwqBlockInputs& inputs, const QuantSpec& spec,
                                            const AwqOptions& options);

// The normalized scale of AWQ for channel magnitudes `mean_abs` and exponent alpha, with the
// weight magnitudes `weight_mean` for duo scaling (undefined: activation scaling):
// s = clamp(x^a / (w^(1-a) + 1e-4), 1e-4) or clamp(x, 1e-4)^a, then s / sqrt(max(s) min(s)).
at::Tensor awq_scales(const at::Tensor& mean_abs, double alpha,
                      const at::Tensor& weight_mean = at::Tensor());

// Duo scaling's w_mean of layers sharing an input: every row of every weight, |w| over max|w| of
// its quantization group (spec.group_size; per row when -1), averaged per input channel.
at::Tensor awq_weight_mean(const std::vector<at::Tensor>& weights, const QuantSpec& spec);

struct AwqClip {
  at::Tensor max_abs;  // (out, groups) the clamp range chosen per row and group
  at::Tensor ratio;    // (out, groups) its shrink factor, max_abs / max|w|
};
// auto_clip's search for one layer: w (out, in), x (tokens, in) its inputs (sampled down to
// options.clip_tokens rows by a stride, as the reference). Needs in % group_size == 0.
AwqClip awq_clip_search(const at::Tensor& w, const at::Tensor& x, const QuantSpec& spec,
                        const AwqOptions& options);

}  // namespace rqat::quant
