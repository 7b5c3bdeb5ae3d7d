// The AVX2 (x86-64-v3) float-activation kernel of low_bit_matmul: the same y = x W^T as
// ops/low_bit_matmul_kernel.h (whose dispatcher runs this one where ops/cpu_target.h says avx2),
// written with AVX2 intrinsics because GCC lowers the generic kernel's 16-lane vectors poorly
// without AVX-512 (a 16-entry float permute becomes sixteen loads; sixteen rows of 16-lane
// accumulators spill): 8 codes at a time, decoded by a variable shift, a mask, an integer-to-float
// conversion, a subtraction of the zero and a multiplication by the scale (the float32 operations
// that make the dequantized weight, in the same order: the reference's weights bit for bit), then
// fused multiply-adds with up to 8 rows of x. Sums differ from the AVX-512 kernel's only in order
// (8 lanes, not 16), within the kernels' stated tolerance.
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
