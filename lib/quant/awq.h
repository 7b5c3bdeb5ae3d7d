// AWQ (Lin et al. 2023, "Activation-aware Weight Quantization"): before rounding, scale each input
// channel of a linear layer by s = mean|x|^alpha (normalized), folding 1/s into the operation that
// produces that input (an RMSNorm weight or the rows of the previous linear layer), so salient
// channels, those with large activations, lose less precision. alpha is searched on a grid per
// scale group to minimize the group's output error on calibration inputs.
//
// Scale groups of a decoder block (as the reference implementation forms them):
//   input_layernorm          -> q_proj, k_proj, v_proj
//   v_proj                   -> o_proj      (only when their shapes match, i.e. without GQA)
//   post_attention_layernorm -> gate_proj, up_proj
//   up_proj                  -> down_proj
// The search loss is the sum over the group's layers of ||X W^T - X Q(W s)^T / s||^2 on the
// captured inputs X (the reference measures the output of the whole attention or MLP module; the
// per-layer form needs no re-run of attention and ranks alphas the same way to first order).
// Folding is exact in real arithmetic: the block computes the same function before quantization.
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "model/layers.h"
#include "quant/quant_spec.h"

#include "io/options.h"

namespace rqat::quant {

struct AwqOptions {
  int grid = 20;             // alpha in {0, 1/grid, ..., (grid-1)/grid}
  int64_t max_rows = 4096;   // calibration tokens kept per layer for the search
  bool scale_v_to_o = true;  // the v_proj -> o_proj group when shapes allow

  // The user's options, declared once (io/options.h); ptq offers them as --awq-*.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.grid, "grid", "AWQ: alpha grid points");
  }
};

struct AwqGroupReport {
  std::string previous;             // e.g. "input_layernorm"
  std::vector<std::string> layers;  // e.g. {"self_attn.q_proj", ...}
  double alpha = 0;                 // chosen exponent
  double loss_identity = 0;         // search loss with s = 1 (plain RTN)
  double loss_best = 0;             // search loss with the chosen s
};

// Captured inputs of one block: per local layer name ("self_attn.q_proj", ...), the mean |x| of
// every input channel over all calibration tokens and a subsample of input rows (rows, in).
struct AwqBlockInputs {
  std::map<std::string, at::Tensor> channel_mean_abs;
  std::map<std::string, at::Tensor> rows;
};

// Searches and folds the scales of every group of `layer` whose layers `spec` quantizes
// (`layer_prefix` + local name is the full module name). Weights and norms change in place.
std::vector<AwqGroupReport> awq_scale_block(model::DecoderLayer& layer,
                                            const std::string& layer_prefix,
                                            const AwqBlockInputs& inputs, const QuantSpec& spec,
                                            const AwqOptions& options);

// The normalized scale of AWQ for channel magnitudes `mean_abs` and exponent alpha:
// s = max(mean_abs, 1e-4)^alpha / sqrt(max(s) * min(s)).
at::Tensor awq_scales(const at::Tensor& mean_abs, double alpha);

}  // namespace rqat::quant
