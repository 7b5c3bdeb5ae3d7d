// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers"): quantizes the columns of a weight one after another and spreads
// each column's rounding error over the columns not yet quantized, weighted by the inverse of the
// layer's input Hessian H = 2 X X^T / n, so that ||W X - Q X||^2 stays small.
//
// As in the reference implementation:
// - dead columns (H_jj == 0: inputs never active) get H_jj = 1 and their weights set to 0;
// - damping: damp_percent * mean(diag H) is added to the diagonal; the upper Cholesky factor of
//   H^-1 (torch linalg_cholesky, cholesky_inverse, linalg_cholesky upper) drives the updates;
//   when a factorization fails the damping fraction is multiplied by kDampRetryFactor (a zero
//   fraction becomes kDampRetryStart) and the factorization retried, up to max_damp_retries times;
// - lazy batch updates: the error of a block of block_size columns reaches the later columns in
//   one matrix product;
// - act_order (desc_act): columns are processed by descending diag(H); groups are then formed in
//   that order and g_idx maps each original column to its group;
// - static_groups: every group's (scale, zero) is computed up front from the original (unpermuted)
//   columns of the group; otherwise at each group boundary from the group's current weights.
// What "current" means is GptqOptions::group_params, because the reference and the paper differ
// when a group starts in the middle of a block (group_size < block_size, e.g. g32/g64 with block
// 128, the usual 2/3-bit settings):
// - kLazy (the default; IST-DASLab's fasterquant, GPTQModel, AutoGPTQ): the group's weights are
//   read from the lazily updated matrix, which holds the updates of the earlier blocks only, not
//   those of the earlier columns of the same block; a per-channel (group -1) range is taken once
//   from the original weights, dead columns included, before they are zeroed. The codes equal a
//   port of fasterquant's (tests/test_gptq.cpp).
// - kUpdated: the fully updated weights, i.e. exactly those of the paper's column-by-column
//   algorithm; dead columns are zeroed before any range is taken.
// When groups start at block starts (group 128, block 128) both are the same. Neither is better
// everywhere: on synthetic layers (test_gptq, 24 x 256, correlated inputs) ||WX - QX||^2 is 8.7%
// higher with kUpdated at W2 g32, 2.4% at W3 g64 with act-order, 2.2% lower at W4 g48 in blocks
// of 64; so the reference's behaviour is the default.
#pragma once

#include <ATen/Tensor.h>

#include <optional>

#include <cstdint>

#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"

#include "io/options.h"

namespace rqat::quant {

inline constexpr double kDampRetryFactor = 10.0;
inline constexpr double kDampRetryStart = 0.01;

// Which weights a dynamic group's (scale, zero) are taken from: see the header comment.
enum class GptqGroupParams { kUpdated, kLazy, kCount };
constexpr EnumNames<GptqGroupParams> enum_names(GptqGroupParams) { return {"updated", "lazy"}; }

struct GptqOptions {
  double damp_percent = 0.01;  // fraction of mean(diag H) added to the diagonal (>= 0)
  int64_t block_size = 128;    // columns per lazy batch update (>= 1)
  bool act_order = false;      // process columns by descending diag(H) (desc_act)
  bool static_groups = false;  // group parameters from the original weights, before any update
  GptqGroupParams group_params = GptqGroupParams::kLazy;
  int max_damp_retries = 4;    // damping increases allowed when H is not positive definite
  bool return_output = false;  // fill GptqReport::output with the quantized weight Q

  // The user's options, declared once (io/options.h): ptq's flags and manifest derive from it.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.damp_percent, "damp-percent", "GPTQ damping, fraction of mean diag(H)");
    v.value(self.block_size, "block-size", "GPTQ lazy-update block");
    v.value(self.act_order, "act-order", "GPTQ desc_act: columns by diag(H)");
    v.value(self.static_groups, "static-groups",
            "GPTQ: group parameters from the original weights");
    v.value(self.group_params, "group-params",
            "GPTQ: a group's scale/zero from the fully updated weights (updated) or, as "
            "fasterquant/GPTQModel, from the block's lazily updated copy (lazy)");
  }
};

struct GptqReport {
  double damp_used = 0;   // damping fraction finally used (options.damp_percent unless increased)
  double damp_value = 0;  // the value added to the diagonal: damp_used * mean(diag H)
  int damp_increases = 0;
  int64_t dead_columns = 0;  // columns with H_jj == 0
  // GPTQ's own error measure (the reference's "Losses"): sum over weights of (w - q)^2 / (2 d_j^2)
  // with d_j^2 = U_jj^2 = [H_F^-1]_jj, H_F the damped Hessian of the columns not yet quantized:
  // the increase of the (damped) quadratic objective that each quantization step causes.
  double loss = 0;
  double seconds = 0;
  at::Tensor output;  // (out, in) float32 Q in original column order, when return_output
};

// weight: (out, in) any float dtype and device; hessian: (in, in) float (e.g. from
// HessianAccumulator). Computed in float32 on the CPU; the result lives on the CPU. The caller's
// Hessian is left unchanged, except when gptq gets the only reference to it (std::move, or a
// temporary) as a contiguous CPU float32 tensor: then its memory, as large as in^2 floats, is
// reused as scratch instead of copied. The returned codes, scales, zeros and g_idx satisfy
// dequantize() == Q bit for bit. Throws rqat::Error for invalid arguments,
// non-finite inputs, or a Hessian that stays indefinite after max_damp_retries increases.
// grid_importance: on a GGUF grid, the scales are those of llama.cpp's importance-matrix
// quantization with these weights (in) instead of its reference quantization. nvfp4_global: as
// rtn_quantize's.
QuantizedWeight gptq_quantize(const at::Tensor& weight, at::Tensor hessian, const QuantSpec& spec,
                              const GptqOptions& options, GptqReport* report = nullptr,
                              const at::Tensor& grid_importance = {},
                              std::optional<float> nvfp4_global = std::nullopt);

}  // namespace rqat::quant
