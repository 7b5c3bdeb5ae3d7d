// See fp_grid_weight.h.
#include "quant/fp_grid_weight.h"

#include <ATen/ATen.h>

#include <cmath>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::quant {

namespace {

// The E2M1 magnitudes in code order (a code's low three bits index them; bit 3 is the sign).
constexpr float kE2m1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

at::Tensor e2m1_table(const at::TensorOptions& options) {
  at::Tensor table = at::empty({16}, options.dtype(at::kFloat).device(at::kCPU));
  float* t = table.data_ptr<float>();
  for (int i = 0; i < 8; ++i) {
    t[i] = kE2m1Magnitudes[i];
    t[i + 8] = -kE2m1Magnitudes[i];
  }
  return table.to(options.device());
}

int64_t grid_bits(FpGrid grid) { return grid == FpGrid::kFp8 ? 8 : 4; }

}  // namespace

at::Tensor fp_code_values(const at::Tensor& codes, FpGrid grid) {
  if (grid == FpGrid::kFp8)
    return codes.to(at::kByte).contiguous().view(at::kFloat8_e4m3fn).to(at::kFloat);
  return e2m1_table(codes.options()).index({codes.to(at::kLong)});
}

at::Tensor fp_value_codes(const at::Tensor& values, FpGrid grid) {
  const at::Tensor v = values.to(at::kFloat);
  if (grid == FpGrid::kFp8) {
    // +0 for -0, so that equal values have equal codes.
    const at::Tensor unsigned_zero = at::where(v == 0, at::zeros_like(v), v);
    return unsigned_zero.to(at::kFloat8_e4m3fn).view(at::kByte);
  }
  // The magnitude's index: the count of table magnitudes below it (values lie on the grid).
  const at::Tensor a = v.abs();
  at::Tensor index = at::zeros(v.sizes(), v.options().dtype(at::kByte));
  for (int i = 1; i < 8; ++i) index += (a >= kE2m1Magnitudes[i]).to(at::kByte);
  return at::where(v < 0, index + 8, index).to(at::kByte);
}

QuantizedWeight fp_grid_weight(const FpQuantized& q) {
  QuantizedWeight w;
  w.fp_grid = q.grid;
  w.bits = static_cast<int>(grid_bits(q.grid));
  const int64_t cols = q.codes.size(1);
  w.group_size = q.grid == FpGrid::kFp8 ? -1 : q.block;
  w.codes = fp_value_codes(q.codes, q.grid);
  w.scales = q.scales.to(at::kFloat).contiguous();
  w.zeros = at::zeros_like(w.scales);
  const int64_t block = q.grid == FpGrid::kFp8 ? cols : q.block;
  w.g_idx =
      at::floor_divide(at::arange(cols, q.codes.options().dtype(at::kLong)), block).to(at::kInt);
  if (q.grid == FpGrid::kNvfp4)
    w.super_scales = at::full({1}, q.global_scale, q.scales.options().dtype(at::kFloat));
  return w;
}

FpQuantized fp_quantized(const QuantizedWeight& w) {
  if (!w.fp_grid) fail("fp_quantized: the layer is not on a floating-point grid");
  FpQuantized q;
  q.grid = *w.fp_grid;
  q.codes = fp_code_values(w.codes, q.grid);
  q.scales = w.scales;
  q.global_scale = q.grid == FpGrid::kNvfp4 ? w.super_scales.item<float>() : 1.0f;
  q.block = q.grid == FpGrid::kFp8 ? w.codes.size(1) : w.group_size;
  return q;
}

QuantizedWeight fp_grid_quantize(const at::Tensor& w, FpGrid grid, std::string_view where,
                                 std::optional<float> nvfp4_global) {
  return fp_grid_weight(fp_quantize(w, grid, where, nvfp4_global));
}

at::Tensor fp_effective_scales(const QuantizedWeight& w) {
  if (w.fp_grid == FpGrid::kNvfp4) return w.scales / w.super_scales.to(w.scales.device());
  return w.scales;
}

void validate_fp_grid(const QuantizedWeight& w, const std::string& name) {
  const FpGrid grid = *w.fp_grid;
  const std::string_view grid_name = enum_name(grid);
  const ops::WeightFormat* format = ops::weight_format(grid_name);
  const int64_t group = grid == FpGrid::kFp8 ? -1 : format->sub_block;
  if (w.bits != format->bits || w.group_size != group)
    fail("{}: {} has {}-bit codes in groups of {}, got bits {} and group size {}", name, grid_name,
         format->bits, group, w.bits, w.group_size);
  if (w.scales.numel() > 0 &&
      (!at::isfinite(w.scales).all().item<bool>() || (w.scales < 0).any().item<bool>()))
    fail("{}: {} scales must be finite and >= 0", name, grid_name);
  if (w.zeros.numel() > 0 && (w.zeros != 0).any().item<bool>())
    fail("{}: {} is symmetric: its zeros must be 0", name, grid_name);
  // E4M3 has no infinity; its NaN codes (S.1111.111) stand for no value.
  if (grid == FpGrid::kFp8 && w.codes.numel() > 0 &&
      (w.codes.bitwise_and(0x7F) == 0x7F).any().item<bool>())
    fail("{}: fp8 codes hold NaN (0x7f / 0xff)", name);
  if (grid == FpGrid::kNvfp4) {
    if (!w.super_scales.defined() || w.super_scales.numel() != 1)
      fail("{}: nvfp4 needs its global scale (super_scales, one float32 value)", name);
    const float global = w.super_scales.item<float>();
    if (!std::isfinite(global) || !(global > 0))
      fail("{}: nvfp4 global scale {} must be finite and > 0", name, global);
    if (!at::equal(w.scales, round_to_e4m3(w.scales)))
      fail("{}: nvfp4 block scales must be FP8 E4M3 values", name);
  } else if (w.super_scales.defined()) {
    fail("{}: {} has no global scale (super_scales must be absent)", name, grid_name);
  }
  if (grid == FpGrid::kMxfp4 && w.scales.numel() > 0) {
    const auto [mantissa, exponent] = at::frexp(w.scales);
    if (!(mantissa == 0.5f).all().item<bool>())
      fail("{}: mxfp4 block scales must be powers of two (E8M0)", name);
  }
}

}  // namespace rqat::quant
