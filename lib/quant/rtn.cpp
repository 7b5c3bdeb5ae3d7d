// See rtn.h.
#include "quant/rtn.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "io/error.h"
#include "quant/fp_grid_weight.h"
#include "quant/gguf/grid_blocks.h"
#include "quant/uniform_quantizer.h"

namespace rqat::quant {

QuantizedWeight rtn_quantize(const at::Tensor& weight, const QuantSpec& spec,
                             const at::Tensor& grid_importance, std::optional<float> nvfp4_global) {
  spec.validate("quant");
  if (weight.dim() != 2 || !c10::isFloatingType(weight.scalar_type()))
    fail("rtn: the weight must be a 2-D float tensor (out, in), got {} dims of {}", weight.dim(),
         c10::toString(weight.scalar_type()));
  at::NoGradGuard no_grad;
  // On a GGUF grid, RTN is llama.cpp's reference quantization of the type (or its
  // importance-matrix quantization).
  if (spec.gguf_grid) return gguf_grid_quantize(*spec.gguf_grid, weight, grid_importance);
  if (grid_importance.defined()) fail("rtn: an importance matrix needs a GGUF grid");
  // On a floating-point grid, RTN is the format's reference quantization.
  if (spec.fp_grid) return fp_grid_quantize(weight, *spec.fp_grid, "rtn", nvfp4_global);
  auto w = weight.to(at::kFloat).contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  const int64_t group = spec.effective_group_size(cols), groups = spec.num_groups(cols);
  auto scales = at::empty({rows, groups}, w.options());
  auto zeros = at::empty({rows, groups}, w.options());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * group, width = std::min(group, cols - begin);
    RowParams p = find_row_params(w.narrow(1, begin, width), spec);
    scales.select(1, g).copy_(p.scales);
    zeros.select(1, g).copy_(p.zeros);
  }
  QuantizedWeight q;
  q.g_idx = contiguous_group_index(cols, spec.group_size).to(w.device());
  q.codes = quantize_to_codes(w, scales, zeros, q.g_idx, spec.bits);
  q.scales = scales;
  q.zeros = zeros;
  q.bits = spec.bits;
  q.group_size = spec.group_size;
  return q;
}

}  // namespace rqat::quant
