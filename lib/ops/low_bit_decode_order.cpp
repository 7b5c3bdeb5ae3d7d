// See low_bit_decode_order.h.
#include "ops/low_bit_decode_order.h"

#include <cmath>

namespace rqat::ops {

void low_bit_x_in_decode_order(const LowBitKernelArgs& args, float* out) {
  struct Pick {
    int code;
    float factor;  // a power of two: exact
  };
  Pick picks[32];
  for (int q = 0; q < 8; ++q)
    for (int l = 0; l < 4; ++l) {
      const int c = 4 * q + l;
      picks[c] = args.bits == 4 ? Pick{nibble_code(q, l), std::ldexp(1.0f, -nibble_shift(q))}
                                : Pick{c, std::ldexp(1.0f, -low_bits_shift(c))};
    }
  const int64_t blocks = args.batch * args.x_stride / 32;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = args.x + 32 * b;
    float* o = out + 32 * b;
    for (int i = 0; i < 32; ++i) o[i] = x[picks[i].code] * picks[i].factor;
  }
}

}  // namespace rqat::ops
