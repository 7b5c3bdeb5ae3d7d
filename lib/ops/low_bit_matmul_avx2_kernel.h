// The AVX2 (x86-64-v3) float-activation kernel of low_bit_matmul: the same y = x W^T as
// ops/low_bit_matmul_kernel.h (whose dispatcher runs this one where ops/cpu_target.h says avx2),
// written with AVX2 intrinsics because GCC lowers the generic kernel's 16-lane vectors poorly
// without AVX-512 (a 16-entry float permute becomes sixteen loads; sixteen rows of 16-lane
// accumulators spill): 8 codes at a time, decoded by a variable shift (4 bits: none, the codes read
// in ops/low_bit_decode_order.h's order), a mask and an integer-to-float conversion, then fused
// multiply-adds of the codes themselves with up to 8 rows of x; each group's scale * (sum - zero *
// sum x) is applied to its sum (8 groups' sums reduced at once), with the scales and zeros read
// from their exact float16 copies where the weight has them. A one-hot x reads the reference's
// (code - zero) * scale exactly; other sums differ from the reference's only in rounding order,
// within the kernels' stated tolerance.
#pragma once

#include <cstdint>

#include "ops/low_bit_matmul_kernel.h"

namespace rqat::ops {

// Whether this build has the kernel (x86-64 with GCC or Clang).
bool low_bit_matmul_avx2_built();

// Output rows [begin, end) of every row of x; the CPU must have AVX2 and FMA.
void low_bit_matmul_avx2_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end);

// low_bit_dequantize_rows (ops/low_bit_matmul_kernel.h) with this kernel's decode.
void low_bit_dequantize_avx2_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end,
                                  float* out);

}  // namespace rqat::ops
