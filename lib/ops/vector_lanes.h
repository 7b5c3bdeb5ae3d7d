// What the CPU kernels share about GCC/Clang vector-extension lanes (no intrinsics; any width):
// unaligned loads and stores through memcpy, which compile to one vector move, and a broadcast.
// Always inlined, so that a wide lane type only ever lives in registers of the kernel's own
// target clone (never passed by value across a call).
#pragma once

#include <cstring>

#define RQAT_LANES_INLINE inline __attribute__((always_inline))

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

}  // namespace rqat::ops
