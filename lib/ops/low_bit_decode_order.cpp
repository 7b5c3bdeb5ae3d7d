// See low_bit_decode_order.h.
#include "ops/low_bit_decode_order.h"

#include <cmath>

namespace rqat::ops {

DecodeSlot decode_slot(int bits, int i) {
  return bits == 4 ? DecodeSlot{nibble_code(i / 4, i % 4), std::ldexp(1.0f, -nibble_shift(i / 4))}
                   : DecodeSlot{i, std::ldexp(1.0f, -low_bits_shift(i))};
}

void low_bit_x_in_decode_order(const LowBitKernelArgs& args, float* out) {
  DecodeSlot slots[32];
  for (int i = 0; i < 32; ++i) slots[i] = decode_slot(args.bits, i);
  const int64_t blocks = args.batch * args.x_stride / 32;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = args.x + 32 * b;
    float* o = out + 32 * b;
    for (int i = 0; i < 32; ++i) o[i] = x[slots[i].code] * slots[i].factor;
  }
}

}  // namespace rqat::ops
