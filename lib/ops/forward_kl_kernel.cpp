// See forward_kl_kernel.h. The lane type is a GCC/Clang vector extension; on x86-64 each row
// function is compiled for AVX-512, AVX2+FMA and the baseline (RQAT_CPU_CLONES) and the loader
// picks the one the CPU runs. A row's tail (V not a multiple of 16) runs through the same lane
// code on a copy padded with -inf logits (exp gives 0 there, and the KL terms are selected away).
// The 64-byte lane type only ever lives in registers of always-inlined helpers, so the calling
// convention GCC warns about (returning it without AVX-512) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "ops/forward_kl_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/vector_exp.h"
#include "ops/vector_lanes.h"

#define RQAT_INLINE inline __attribute__((always_inline))

namespace rqat::ops {

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kChunk = 1024;  // elements summed in float lanes before going into a double
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
using Ints = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

RQAT_INLINE Floats splat(float x) { return splat_lanes<Floats>(x); }
RQAT_INLINE Floats exp_lanes(Floats x) { return exp_nonpositive<Floats, Ints>(x); }

// 16 logits from column j of a row times 1 / T; past the row's end -inf.
RQAT_INLINE Floats scaled(const float* row, int64_t j, int64_t vocab, float inv_t) {
  if (j + kLanes <= vocab) return load_lanes<Floats>(row + j) * inv_t;
  Floats v = splat(kMinusInf);
  for (int64_t i = 0; j + i < vocab; ++i) v[i] = row[j + i] * inv_t;
  return v;
}

RQAT_INLINE float lane_max(Floats v) { return lane_max16(v); }

// Sums of lanes, a chunk of the row at a time into a double.
struct RowSum {
  Floats lanes{};
  int64_t count = 0;
  double total = 0;
  RQAT_INLINE void add(Floats v) {
    lanes += v;
    if (++count * kLanes == kChunk) flush();
  }
  RQAT_INLINE void flush() {
    total += lane_sum16(lanes);
    lanes = Floats{};
    count = 0;
  }
  RQAT_INLINE double sum() {
    flush();
    return total;
  }
};

RQAT_CPU_CLONES
void forward_rows(const float* student, const float* teacher, int64_t begin, int64_t end,
                  int64_t vocab, float inv_t, float* kl, float* student_lse, float* teacher_lse) {
  for (int64_t r = begin; r < end; ++r) {
    const float* s = student + r * vocab;
    const float* t = teacher + r * vocab;
    Floats max_a = splat(kMinusInf), max_b = splat(kMinusInf);
    for (int64_t j = 0; j < vocab; j += kLanes) {
      const Floats a = scaled(s, j, vocab, inv_t), b = scaled(t, j, vocab, inv_t);
      max_a = max_a < a ? a : max_a;
      max_b = max_b < b ? b : max_b;
    }
    const float ma = lane_max(max_a), mb = lane_max(max_b);
    RowSum sum_a, sum_b;
    for (int64_t j = 0; j < vocab; j += kLanes) {
      sum_a.add(exp_lanes(scaled(s, j, vocab, inv_t) - ma));
      sum_b.add(exp_lanes(scaled(t, j, vocab, inv_t) - mb));
    }
    const float lse_a = ma + static_cast<float>(std::log(sum_a.sum()));
    const float lse_b = mb + static_cast<float>(std::log(sum_b.sum()));
    RowSum terms;
    for (int64_t j = 0; j < vocab; j += kLanes) {
      const Floats log_q = scaled(s, j, vocab, inv_t) - lse_a;
      const Floats log_p = scaled(t, j, vocab, inv_t) - lse_b;
      const Floats term = exp_lanes(log_p) * (log_p - log_q);
      terms.add(log_p == splat(kMinusInf) ? Floats{} : term);  // padding (and p = 0): no term
    }
    kl[r] = static_cast<float>(terms.sum());
    student_lse[r] = lse_a;
    teacher_lse[r] = lse_b;
  }
}

RQAT_CPU_CLONES
void backward_rows(const float* student, const float* teacher, const float* student_lse,
                   const float* teacher_lse, const float* grad_kl, int64_t begin, int64_t end,
                   int64_t vocab, float inv_t, float* grad_student) {
  for (int64_t r = begin; r < end; ++r) {
    const float* s = student + r * vocab;
    const float* t = teacher + r * vocab;
    float* out = grad_student + r * vocab;
    const float lse_a = student_lse[r], lse_b = teacher_lse[r], factor = grad_kl[r] * inv_t;
    for (int64_t j = 0; j < vocab; j += kLanes) {
      const Floats q = exp_lanes(scaled(s, j, vocab, inv_t) - lse_a);
      const Floats p = exp_lanes(scaled(t, j, vocab, inv_t) - lse_b);
      const Floats g = (q - p) * factor;
      if (j + kLanes <= vocab) {
        store_lanes(out + j, g);
      } else {
        for (int64_t i = 0; j + i < vocab; ++i) out[j + i] = g[i];
      }
    }
  }
}

// Rows per task: a few rows of a small vocabulary, one row of a large one.
int64_t grain(int64_t vocab) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(vocab, 1)); }

}  // namespace

void forward_kl_rows_cpu(const float* student, const float* teacher, int64_t rows, int64_t vocab,
                         float temperature, float* kl, float* student_lse, float* teacher_lse) {
  const float inv_t = 1.0f / temperature;
  at::parallel_for(0, rows, grain(vocab), [&](int64_t begin, int64_t end) {
    forward_rows(student, teacher, begin, end, vocab, inv_t, kl, student_lse, teacher_lse);
  });
}

void forward_kl_backward_cpu(const float* student, const float* teacher, const float* student_lse,
                             const float* teacher_lse, const float* grad_kl, int64_t rows,
                             int64_t vocab, float temperature, float* grad_student) {
  const float inv_t = 1.0f / temperature;
  at::parallel_for(0, rows, grain(vocab), [&](int64_t begin, int64_t end) {
    backward_rows(student, teacher, student_lse, teacher_lse, grad_kl, begin, end, vocab, inv_t,
                  grad_student);
  });
}

}  // namespace rqat::ops
