// The baseline target's 2-4-bit float-activation kernel of low_bit_matmul (ops/cpu_target.h: SSE2
// on x86-64, NEON on aarch64): the same y = x W^T as ops/low_bit_matmul_kernel.h, whose dispatcher
// runs it, in 4-lane vectors of the compiler's. The generic kernel's decode shifts every lane by
// its own amount; SSE2 has no such shift, so GCC ran it one lane at a time (17-30x slower than
// AVX2). Here a block is read in ops/low_bit_decode_order.h's order instead: per 4 codes a mask
// and a conversion (3 bits: two, and one multiply-add), then multiply-adds of the codes themselves
// with up to 8 rows of x, and each group's scale * (sum - zero * sum x) applied to its sum, as the
// AVX2 kernel does. A one-hot x reads the reference's (code - zero) * scale exactly; other sums
// differ from the reference's only in rounding order, within the kernels' stated tolerance.
#pragma once

#include <cstdint>

#include "ops/low_bit_matmul_kernel.h"

namespace rqat::ops {

// Output rows [begin, end) of every row of x, for 2-4-bit codes with args.x_decode_order set.
void low_bit_matmul_narrow_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end);

}  // namespace rqat::ops
