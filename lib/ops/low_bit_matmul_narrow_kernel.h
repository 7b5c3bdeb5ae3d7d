// The baseline target's 2-4-bit kernel of low_bit_matmul (ops/cpu_target.h: SSE2 on x86-64, NEON
// on aarch64), float and int8 activations: the same y = x W^T as ops/low_bit_matmul_kernel.h and
// ops/low_bit_matmul_int8_kernel.h, whose dispatchers run it, in 4-lane vectors of the compiler's.
// The generic float kernel's decode shifts every lane by its own amount; SSE2 has no such shift,
// so GCC ran it one lane at a time (17-30x slower than AVX2), and the int8 kernel's portable loop
// read codes bit by bit. Here a block is read in ops/low_bit_decode_order.h's order instead: per 4
// codes a mask and a conversion (3 bits: two, and one multiply-add), then multiply-adds of the
// codes themselves with up to 8 rows of x (products of small integers with x, exact), and
//   float: each group's scale * (sum - zero * sum x) applied to its sum, as the AVX2 kernel does.
//     A one-hot x reads the reference's (code - zero) * scale exactly; other sums differ from the
//     reference's only in rounding order, within the kernels' stated tolerance;
//   int8: x holds the rounded q (integers), so a block's lanes are exact integer sums, multiplied
//     by scale * d_b as the AVX2 int8 kernel does, the zero term subtracted per group.
#pragma once

#include <cstdint>

#include "ops/low_bit_matmul_kernel.h"

namespace rqat::ops {

// Output rows [begin, end) of every row of x, for 2-4-bit codes with args.x_decode_order set.
void low_bit_matmul_narrow_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end);

// The same with int8 activations: args.x_decode_order holds q (batch, x_stride) in decode order,
// args.block_scales d_b (batch, x_stride / 32), args.xsum each group's sum_b d_b sum_j q_j.
void low_bit_matmul_narrow_int8_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end);

// low_bit_dequantize_rows (ops/low_bit_matmul_kernel.h) for 2-4 bits with this kernel's masks
// (codes in their own order, no x): the reference's weights bit for bit.
void low_bit_dequantize_narrow_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end,
                                    float* out);

}  // namespace rqat::ops
