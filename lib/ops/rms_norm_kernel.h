// RMSNorm's float32 CPU kernels, forward and backward, for rows of `dim` contiguous floats:
//   r = 1 / sqrt(mean(x^2) + eps),  y = w * (x * r)                                     (forward)
//   dw = sum over rows of g * x * r
//   dx = r * (g * w) - x * r^3 * dot(g * w, x) / dim                                    (backward)
// The forward is the one pass per row that inference always ran (same arithmetic, same order:
// a decode's results do not move); it also returns r per row, which the backward reuses instead
// of recomputing it. The backward's per-row dot products accumulate in double. dw sums the rows in
// fixed blocks of kRmsNormRowBlock (each block in order, then the blocks in order), so the result
// does not depend on the number of threads. The twin these are tested against is the composite
// of ATen operators under autograd (ops/rms_norm.h: rms_norm_ref).
#pragma once

#include <cstdint>

namespace rqat::ops {

inline constexpr int64_t kRmsNormRowBlock = 32;

// x, y: rows x dim; w: dim; rstd: rows (may be null when the caller needs only y).
void rms_norm_forward_cpu(const float* x, const float* w, float eps, int64_t rows, int64_t dim,
                          float* y, float* rstd);

// g: the gradient of y (rows x dim); dx: rows x dim or null (not wanted); dw: dim or null.
void rms_norm_backward_cpu(const float* g, const float* x, const float* w, const float* rstd,
                           int64_t rows, int64_t dim, float* dx, float* dw);

}  // namespace rqat::ops
