// See swiglu_kernel.h. 16 lanes at a time (a GCC/Clang vector extension; RQAT_CPU_CLONES compiles
// each task for AVX-512, AVX2+FMA and the baseline), the last values of a task through a padded
// copy of the same lanes; chunks of the n values are split over threads.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "ops/swiglu_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "ops/vector_exp.h"
#include "ops/vector_lanes.h"

#define RQAT_INLINE inline __attribute__((always_inline))

namespace rqat::ops {

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kGrain = 16384;
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
using Ints = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

// sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) below, with e = exp(-|g|) <= 1.
RQAT_INLINE Floats sigmoid(Floats g) {
  const Floats negative_abs = g < Floats{} ? g : -g;
  const Floats e = exp_nonpositive<Floats, Ints>(negative_abs);
  const Floats numerator = g < Floats{} ? e : splat_lanes<Floats>(1.0f);
  return numerator / (1.0f + e);
}

RQAT_INLINE Floats load_part(const float* p, int64_t count) {
  if (count == kLanes) return load_lanes<Floats>(p);
  Floats v{};
  for (int64_t j = 0; j < count; ++j) v[j] = p[j];
  return v;
}

RQAT_INLINE void store_part(float* p, Floats v, int64_t count) {
  if (count == kLanes) return store_lanes(p, v);
  for (int64_t j = 0; j < count; ++j) p[j] = v[j];
}

RQAT_INLINE void forward_vector(const float* gate, const float* up, int64_t i, int64_t count,
                                float* out) {
  const Floats g = load_part(gate + i, count);
  store_part(out + i, g * sigmoid(g) * load_part(up + i, count), count);
}

RQAT_INLINE void backward_vector(const float* grad, const float* gate, const float* up, int64_t i,
                                 int64_t count, float* grad_gate, float* grad_up) {
  const Floats g = load_part(gate + i, count), dh = load_part(grad + i, count);
  const Floats s = sigmoid(g);
  if (grad_up != nullptr) store_part(grad_up + i, dh * (g * s), count);
  if (grad_gate != nullptr) {
    const Floats u = load_part(up + i, count);
    store_part(grad_gate + i, dh * u * (s * (1.0f + g * (1.0f - s))), count);
  }
}

// Values [begin, end): whole vectors, then the tail through padded lanes.
RQAT_CPU_CLONES
void forward_task(const float* gate, const float* up, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) forward_vector(gate, up, i, kLanes, out);
  if (i < end) forward_vector(gate, up, i, end - i, out);
}

RQAT_CPU_CLONES
void backward_task(const float* grad, const float* gate, const float* up, int64_t begin,
                   int64_t end, float* grad_gate, float* grad_up) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes)
    backward_vector(grad, gate, up, i, kLanes, grad_gate, grad_up);
  if (i < end) backward_vector(grad, gate, up, i, end - i, grad_gate, grad_up);
}

}  // namespace

void swiglu_forward_cpu(const float* gate, const float* up, int64_t n, float* out) {
  at::parallel_for(0, n, kGrain,
                   [&](int64_t begin, int64_t end) { forward_task(gate, up, begin, end, out); });
}

void swiglu_backward_cpu(const float* grad, const float* gate, const float* up, int64_t n,
                         float* grad_gate, float* grad_up) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    backward_task(grad, gate, up, begin, end, grad_gate, grad_up);
  });
}

}  // namespace rqat::ops
