// What the CPU kernels share about GCC/Clang vector-extension lanes (no intrinsics; any width):
// unaligned loads and stores through memcpy, which compile to one vector move, and a broadcast.
// Always inlined, so that a wide lane type only ever lives in registers of the kernel's own
// target clone (never passed by value across a call).
#pragma once

#include <algorithm>
#include <cstring>

#define RQAT_LANES_INLINE inline __attribute__((always_inline))

// A kernel's task functions are compiled for AVX-512, AVX2+FMA and the baseline (GCC target
// clones; the loader picks the one the CPU runs), so the library itself keeps the baseline target.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RQAT_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// Kernels dispatched by ops/cpu_target.h compile one function per target with these.
#define RQAT_X86_TARGETS 1
#define RQAT_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#else
#define RQAT_CPU_CLONES
#endif

namespace rqat::ops {

template <class Lanes>
RQAT_LANES_INLINE Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class Lanes>
RQAT_LANES_INLINE void store_lanes(float* p, Lanes v) {
  std::memcpy(p, &v, sizeof v);
}

template <class Lanes>
RQAT_LANES_INLINE Lanes splat_lanes(float x) {
  return Lanes{} + x;
}

// The sum of 16 float lanes, as a tree (8 + 8, 4 + 4, then pairs).
template <class Lanes16>
RQAT_LANES_INLINE float lane_sum16(Lanes16 v) {
  using Floats8 = float __attribute__((vector_size(8 * sizeof(float))));
  using Floats4 = float __attribute__((vector_size(4 * sizeof(float))));
  const Floats8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Floats4 b =
      __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// The largest of 16 float lanes (exact: max does not round, so any order gives the same value).
template <class Lanes16>
RQAT_LANES_INLINE float lane_max16(Lanes16 v) {
  float m = v[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, v[i]);
  return m;
}

}  // namespace rqat::ops
