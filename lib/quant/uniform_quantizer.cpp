// See uniform_quantizer.h. The per-row search runs as plain loops over float32 rows: every
// quantity is computed with the same float32 operations as the reference quantizer's tensor code
// (products, differences, IEEE division, round half to even), and the clipping error is summed in
// double so that the choice between two close candidates does not depend on summation order.
#include "quant/uniform_quantizer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "io/error.h"

namespace rqat::quant {

namespace {

struct ScaleZero {
  float scale;
  float zero;
};

// Sum over the row of |w' - w|^kClipNorm for one candidate (scale, zero).
double clip_error(const float* row, int64_t count, ScaleZero p, float max_code) {
  double err = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float dq = (quantize_code(row[i], p.scale, p.zero, max_code) - p.zero) * p.scale;
    err += std::pow(std::fabs(static_cast<double>(dq - row[i])), kClipNorm);
  }
  return err;
}

ScaleZero row_params(const float* row, int64_t count, float max_code, bool symmetric,
                     bool clip_search, bool v1_zeros) {
  float lo = 0, hi = 0;  // the range always contains 0, so that 0 is exactly representable
  for (int64_t i = 0; i < count; ++i) {
    lo = std::min(lo, row[i]);
    hi = std::max(hi, row[i]);
  }
  if (symmetric) {
    hi = std::max(-lo, hi);
    lo = -hi;
  }
  const float sym_zero = (max_code + 1) / 2;
  auto params_for = [&](float lo_, float hi_) {
    const float scale = (hi_ - lo_) / max_code;
    if (symmetric) return ScaleZero{scale, sym_zero};
    const float zero = std::nearbyint(-lo_ / scale);
    // v1 zeros: -lo < scale / 2 here, so the grid [-hi / (maxq - 1), hi] still holds lo.
    if (v1_zeros && zero == 0) return ScaleZero{hi_ / (max_code - 1), 1.0f};
    return ScaleZero{scale, zero};
  };
  ScaleZero best = params_for(lo, hi);
  // An all-zero row (or one so tiny that its step underflows) gets the range [-1, 1].
  if (!(best.scale > 0)) {
    lo = -1;
    hi = 1;
    best = params_for(lo, hi);
  }
  if (!clip_search) return best;
  double best_err = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kClipSteps; ++i) {
    // The shrink factor is a float32 number, as when the reference multiplies a float32 tensor.
    const float p = static_cast<float>(1.0 - static_cast<double>(i) / kClipGrid);
    const ScaleZero candidate = params_for(p * lo, p * hi);
    if (!(candidate.scale > 0)) continue;
    const double err = clip_error(row, count, candidate, max_code);
    if (err < best_err) {
      best_err = err;
      best = candidate;
    }
  }
  return best;
}

}  // namespace

RowParams find_row_params(const at::Tensor& block, const QuantSpec& spec) {
  if (block.dim() != 2 || block.size(1) < 1 || !c10::isFloatingType(block.scalar_type()))
    fail("quantizer: expected a float (rows, k >= 1) block of weights, got shape {}",
         fmt::join(block.sizes(), "x"));
  at::NoGradGuard no_grad;
  auto x = block.to(at::kCPU, at::kFloat).contiguous();
  if (spec.per_tensor) {
    // One row of every value; its (scale, zero) repeated for each row of the block.
    const int64_t rows = x.size(0);
    QuantSpec whole = spec;
    whole.per_tensor = false;
    RowParams one = find_row_params(x.reshape({1, -1}), whole);
    return {one.scales.expand({rows}).contiguous().to(block.device()),
            one.zeros.expand({rows}).contiguous().to(block.device())};
  }
  const int64_t rows = x.size(0), count = x.size(1);
  if (!at::isfinite(x).all().item<bool>())
    fail("quantizer: the weights hold NaN or infinite values");
  auto scales = at::empty({rows}, x.options()), zeros = at::empty({rows}, x.options());
  const float* src = x.data_ptr<float>();
  float* s = scales.data_ptr<float>();
  float* z = zeros.data_ptr<float>();
  const float max_code = static_cast<float>(spec.max_code());
  const int64_t grain = std::max<int64_t>(1, (spec.clip_search ? 256 : 16384) / count);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const ScaleZero p = row_params(src + r * count, count, max_code, spec.symmetric,
                                     spec.clip_search, spec.v1_zeros);
      s[r] = p.scale;
      z[r] = p.zero;
    }
  });
  return {scales.to(block.device()), zeros.to(block.device())};
}

at::Tensor quantize_to_codes(const at::Tensor& weight, const at::Tensor& scales,
                             const at::Tensor& zeros, const at::Tensor& g_idx, int bits) {
  auto index = g_idx.to(weight.device(), at::kLong);
  auto s = scales.index_select(1, index), z = zeros.index_select(1, index);
  auto q = at::clamp(at::round(weight.to(at::kFloat) / s) + z, 0, (1 << bits) - 1);
  return q.to(at::kByte);
}

at::Tensor contiguous_group_index(int64_t in_features, int64_t group_size) {
  auto columns = at::arange(in_features, at::kLong);
  if (group_size == -1) return at::zeros({in_features}, at::kInt);
  return at::floor_divide(columns, group_size).to(at::kInt);
}

}  // namespace rqat::quant
