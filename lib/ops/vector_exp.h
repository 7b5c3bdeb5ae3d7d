// exp of GCC/Clang vector-extension lanes (any width) for x <= 0: what the CPU kernels that
// normalize rows share (attention's scores minus their maximum or log-sum-exp, the distillation
// loss's logits minus theirs). Within 2 ulp: x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for exp(r) (the Cephes expf coefficients) and 2^n built in the exponent bits. Below
// -87.3 the result is clamped to exp(-87.3) ~ 1e-38, which callers that need an exact zero (masked
// keys) select away. Always inlined, as every lane helper (ops/vector_lanes.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/vector_lanes.h"

namespace rqat::ops {

// Floats: a vector of float lanes; Ints: int32 lanes of the same count.
template <class Floats, class Ints>
RQAT_LANES_INLINE Floats exp_nonpositive(Floats x) {
  const Floats floor = splat_lanes<Floats>(-87.3f);
  x = x < floor ? floor : x;
  // Adding 1.5 * 2^23 rounds x / ln2 to the nearest integer in the low mantissa bits.
  constexpr float kRoundShift = 12582912.0f;
  const Floats n = (x * 1.44269504088896341f + kRoundShift) - kRoundShift;
  Floats r = x - n * 0.693359375f;  // ln2 split in two so that n * ln2 is exact enough
  r = r - n * -2.12194440e-4f;
  Floats poly = splat_lanes<Floats>(1.9875691500e-4f);
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const Floats y = poly * r * r + r + 1.0f;
  const Ints exponent = (__builtin_convertvector(n, Ints) + 127) << 23;
  Floats scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return y * scale;
}

}  // namespace rqat::ops
