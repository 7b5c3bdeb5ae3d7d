// See fp_grid.h.
#include "quant/fp_grid.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::quant {

namespace {

// The row of `grid` in the format table: its block along a row (0: the whole row).
int64_t table_block(FpGrid grid) {
  const ops::WeightFormat* format = ops::weight_format(enum_name(grid));
  return format == nullptr ? 0 : format->sub_block;
}

// (rows, cols) -> (rows, blocks, block), zero-padded: a short last block's padding is 0, which
// changes neither its absolute maximum nor its codes (dropped again by from_blocks).
at::Tensor to_blocks(const at::Tensor& w, int64_t block) {
  const int64_t cols = w.size(1), blocks = (cols + block - 1) / block;
  const at::Tensor padded =
      blocks * block == cols ? w : at::constant_pad_nd(w, {0, blocks * block - cols}, 0);
  return padded.reshape({w.size(0), blocks, block});
}

at::Tensor from_blocks(const at::Tensor& blocked, int64_t cols) {
  return blocked.reshape({blocked.size(0), -1}).narrow(1, 0, cols).contiguous();
}

}  // namespace

at::Tensor round_to_e2m1(const at::Tensor& x) {
  // Between consecutive values the midpoint rounds to the even code: 0.25 -> 0, 0.75 -> 1,
  // 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6).
  const at::Tensor a = x.abs().to(at::kFloat);
  at::Tensor v = at::zeros_like(a);
  v = at::where(a > 0.25f, at::full_like(a, 0.5f), v);
  v = at::where(a >= 0.75f, at::full_like(a, 1.0f), v);
  v = at::where(a > 1.25f, at::full_like(a, 1.5f), v);
  v = at::where(a >= 1.75f, at::full_like(a, 2.0f), v);
  v = at::where(a > 2.5f, at::full_like(a, 3.0f), v);
  v = at::where(a >= 3.5f, at::full_like(a, 4.0f), v);
  v = at::where(a > 5.0f, at::full_like(a, 6.0f), v);
  return at::where(x < 0, -v, v);
}

at::Tensor round_to_e4m3(const at::Tensor& x) {
  // PyTorch's float8_e4m3fn conversion rounds to nearest even; saturating first keeps values
  // past 448 off the NaN code.
  return x.to(at::kFloat).clamp(-kE4m3Max, kE4m3Max).to(at::kFloat8_e4m3fn).to(at::kFloat);
}

float nvfp4_global_scale(float amax) {
  if (!(amax > 0)) return 1.0f;
  const float reciprocal = 1.0f / std::max(amax, std::numeric_limits<float>::min());
  return kE4m3Max * kE2m1Max * reciprocal;
}

FpQuantized fp_quantize(const at::Tensor& weight, FpGrid grid, std::string_view where,
                        std::optional<float> global_scale) {
  if (weight.dim() != 2)
    fail("{}: {} quantizes 2-D weights, got {}-D", where, enum_name(grid), weight.dim());
  if (weight.numel() == 0) fail("{}: the weight is empty", where);
  const at::Tensor w = weight.detach().to(at::kFloat).contiguous();
  if (!at::isfinite(w).all().item<bool>())
    fail("{}: the weight has NaN or infinite values; {} cannot hold them", where, enum_name(grid));
  FpQuantized q;
  q.grid = grid;
  const int64_t rows = w.size(0), cols = w.size(1);
  q.block = grid == FpGrid::kFp8 ? cols : table_block(grid);
  const at::Tensor blocks = to_blocks(w, q.block);
  const at::Tensor amax = blocks.abs().amax(2, /*keepdim=*/true);  // (rows, blocks, 1)
  at::Tensor global;
  if (grid == FpGrid::kNvfp4) {
    q.global_scale = global_scale ? *global_scale : nvfp4_global_scale(w.abs().max().item<float>());
    if (!std::isfinite(q.global_scale) || !(q.global_scale > 0))
      fail("{}: nvfp4 global scale {} must be finite and > 0", where, q.global_scale);
    global = at::full({}, q.global_scale, w.options());
  }
  const at::Tensor scales = fp_block_scales(amax, grid, global);
  // The element divides by the block's effective scale (nvfp4: scale_b / global, as
  // compressed-tensors quantizes), the same float32 number dequantization multiplies by; a scale
  // of 0 (an all-zero nvfp4 block) holds only 0.
  const at::Tensor effective = grid == FpGrid::kNvfp4 ? scales / global : scales;
  const at::Tensor safe = at::where(effective > 0, effective, at::ones_like(effective));
  const at::Tensor codes =
      at::where(effective > 0, fp_round(blocks / safe, grid), at::zeros_like(blocks));
  q.codes = from_blocks(codes, cols);
  q.scales = scales.reshape({rows, -1}).contiguous();
  return q;
}

at::Tensor fp_round(const at::Tensor& x, FpGrid grid) {
  return grid == FpGrid::kFp8 ? round_to_e4m3(x) : round_to_e2m1(x);
}

int64_t fp_block_size(FpGrid grid) { return grid == FpGrid::kFp8 ? 0 : table_block(grid); }

at::Tensor fp_block_scales(const at::Tensor& amax, FpGrid grid, const at::Tensor& global) {
  switch (grid) {
    case FpGrid::kNvfp4:
      if (!global.defined()) fail("nvfp4 block scales need the global scale");
      return round_to_e4m3(amax / kE2m1Max * global);
    case FpGrid::kMxfp4: {
      // 2^(floor(log2 amax) - 2): amax = m 2^e with m in [0.5, 1) (frexp, exact where a rounded
      // log2 would not be just below a power of two); E8M0 holds 2^-127 .. 2^127, and an
      // all-zero block takes the smallest.
      const auto [mantissa, exponent] = at::frexp(amax);
      const at::Tensor shared =
          at::where(amax > 0, exponent.to(at::kFloat) - 3.0f, at::full_like(amax, -127.0f));
      return at::exp2(shared.clamp(-127.0f, 127.0f));
    }
    case FpGrid::kFp8:
      // At least float32's epsilon (as compressed-tensors clamps it): a zero row decodes to zeros.
      return at::clamp_min(amax / kE4m3Max, std::numeric_limits<float>::epsilon());
    default:
      fail("unknown floating-point grid");
  }
}

at::Tensor fp_dequantize(const FpQuantized& q) {
  const int64_t cols = q.codes.size(1);
  // nvfp4: the block's effective scale scale_b / global in float32, then times the code.
  const at::Tensor scale = q.grid == FpGrid::kNvfp4 ? q.scales / q.global_scale : q.scales;
  return from_blocks(to_blocks(q.codes, q.block) * scale.unsqueeze(2), cols);
}

}  // namespace rqat::quant
