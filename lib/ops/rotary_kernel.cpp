// See rotary_kernel.h. Rows of x are split over threads; each row's two halves are plain loops
// the compiler vectorizes (RQAT_CPU_CLONES compiles them for AVX-512, AVX2 and the baseline).
// Built with -ffp-contract=off (lib/CMakeLists.txt): a product and a sum contracted into one
// fused multiply-add would round once where the composite rounds twice.
#include "ops/rotary_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "ops/vector_lanes.h"

namespace rqat::ops {

namespace {

// About 16 KiB of x a task: enough work to be worth a thread, small enough to balance.
constexpr int64_t kGrainFloats = 4096;

// Rows [begin, end) of the (B, heads, T) rows in order, with where each one's x (or dx), its
// (B, heads, T, D) contiguous twin and its angles start: one division per task, not three a row
// (a row is one head of 32-128 values, so the divisions would cost as much as the row).
template <class Body>
inline __attribute__((always_inline)) void for_each_row(const RotaryProblem& p, int64_t begin,
                                                        int64_t end, Body&& body) {
  int64_t t = begin % p.steps, h = (begin / p.steps) % p.heads, b = begin / (p.steps * p.heads);
  for (int64_t r = begin; r < end; ++r) {
    body(b * p.x_batch_stride + h * p.x_head_stride + t * p.x_step_stride, r * p.dim,
         b * p.angle_batch_stride + t * p.dim);
    if (++t == p.steps) {
      t = 0;
      if (++h == p.heads) {
        h = 0;
        ++b;
      }
    }
  }
}

// One row of D = 2 * half values: dst[i] = src[i] c[i] + src[i ^ half] s[k], with k = i in the
// forward and k = i ^ half (the partner's sine) in the backward (rotary_kernel.h).
template <bool kBackward>
inline __attribute__((always_inline)) void rotate_row(const float* __restrict src,
                                                      const float* __restrict c,
                                                      const float* __restrict s,
                                                      float* __restrict dst, int64_t half) {
  for (int64_t i = 0; i < half; ++i)
    dst[i] = src[i] * c[i] + src[i + half] * s[kBackward ? i + half : i];
  for (int64_t i = half; i < 2 * half; ++i)
    dst[i] = src[i] * c[i] + src[i - half] * s[kBackward ? i - half : i];
}

RQAT_CPU_CLONES
void forward_rows(const RotaryProblem& p, const float* x, const float* cos, const float* sin,
                  float* out, int64_t begin, int64_t end) {
  for_each_row(p, begin, end, [&](int64_t x_at, int64_t out_at, int64_t angle_at) {
    rotate_row<false>(x + x_at, cos + angle_at, sin + angle_at, out + out_at, p.dim / 2);
  });
}

RQAT_CPU_CLONES
void backward_rows(const RotaryProblem& p, const float* dout, const float* cos, const float* sin,
                   float* dx, int64_t begin, int64_t end) {
  for_each_row(p, begin, end, [&](int64_t x_at, int64_t out_at, int64_t angle_at) {
    rotate_row<true>(dout + out_at, cos + angle_at, sin + angle_at, dx + x_at, p.dim / 2);
  });
}

int64_t rows_of(const RotaryProblem& p) { return p.batch * p.heads * p.steps; }
int64_t grain_rows(const RotaryProblem& p) { return std::max<int64_t>(1, kGrainFloats / p.dim); }

}  // namespace

void rotary_forward_cpu(const RotaryProblem& p, const float* x, const float* cos,
                        const float* signed_sin, float* out) {
  at::parallel_for(0, rows_of(p), grain_rows(p), [&](int64_t begin, int64_t end) {
    forward_rows(p, x, cos, signed_sin, out, begin, end);
  });
}

void rotary_backward_cpu(const RotaryProblem& p, const float* dout, const float* cos,
                         const float* signed_sin, float* dx) {
  at::parallel_for(0, rows_of(p), grain_rows(p), [&](int64_t begin, int64_t end) {
    backward_rows(p, dout, cos, signed_sin, dx, begin, end);
  });
}

}  // namespace rqat::ops
