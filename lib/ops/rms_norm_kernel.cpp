// See rms_norm_kernel.h. Rows are split over threads; each row is independent in the forward and
// in dx, and dw's partial sums live per block of rows (a blocks x dim scratch), summed in order.
#include "ops/rms_norm_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace rqat::ops {

void rms_norm_forward_cpu(const float* x, const float* w, float eps, int64_t rows, int64_t dim,
                          float* y, float* rstd) {
  at::parallel_for(0, rows, /*grain_size=*/64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * dim;
      float sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += row[i] * row[i];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
      float* out = y + r * dim;
      for (int64_t i = 0; i < dim; ++i) out[i] = w[i] * (row[i] * inv);
      if (rstd != nullptr) rstd[r] = inv;
    }
  });
}

void rms_norm_backward_cpu(const float* g, const float* x, const float* w, const float* rstd,
                           int64_t rows, int64_t dim, float* dx, float* dw) {
  const int64_t blocks = (rows + kRmsNormRowBlock - 1) / kRmsNormRowBlock;
  std::vector<float> partial(dw != nullptr ? static_cast<size_t>(blocks * dim) : 0, 0.0f);
  at::parallel_for(0, blocks, /*grain_size=*/1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      float* block_dw = dw != nullptr ? partial.data() + b * dim : nullptr;
      const int64_t end = std::min(rows, (b + 1) * kRmsNormRowBlock);
      for (int64_t r = b * kRmsNormRowBlock; r < end; ++r) {
        const float* grow = g + r * dim;
        const float* xrow = x + r * dim;
        const float inv = rstd[r];
        if (block_dw != nullptr)
          for (int64_t i = 0; i < dim; ++i) block_dw[i] += grow[i] * xrow[i] * inv;
        if (dx == nullptr) continue;
        double dot = 0;
        for (int64_t i = 0; i < dim; ++i)
          dot += static_cast<double>(grow[i] * w[i]) * static_cast<double>(xrow[i]);
        const float coefficient = static_cast<float>(static_cast<double>(inv) * inv * inv * dot /
                                                     static_cast<double>(dim));
        float* out = dx + r * dim;
        for (int64_t i = 0; i < dim; ++i) out[i] = inv * (grow[i] * w[i]) - xrow[i] * coefficient;
      }
    }
  });
  if (dw == nullptr) return;
  std::vector<double> sum(static_cast<size_t>(dim), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < dim; ++i) sum[i] += partial[static_cast<size_t>(b * dim + i)];
  for (int64_t i = 0; i < dim; ++i) dw[i] = static_cast<float>(sum[i]);
}

}  // namespace rqat::ops
