// The integer CPU kernel of low_bit_matmul (ops/low_bit_matmul.h) for 2-4 bit weights, chosen by
// --low-bit-activations int8: x is rounded to 8 bits per block of 32 columns first, as llama.cpp
// rounds activations to its q8_0/q8_K blocks before its integer dot products, and each block of
// 32 codes is then one integer dot product (on AVX2: vpmaddubsw + vpmaddwd over 32 codes at
// once) and one float multiply-add. The float kernel (ops/low_bit_matmul_kernel.h) multiplies
// float32 x with dequantized float32 weights instead: exact to float32 rounding, and bound by
// its instructions per weight rather than by the bytes of the codes.
//
// What int8 computes, exactly (the reference below, and what the tests check the kernel against):
//   for each row of x and each block b of 32 kernel columns (each group padded to whole blocks):
//     d_b = max_j |x_j| / 127,  q_j = round-half-even(x_j / d_b) in [-127, 127]  (d_b = 0: q = 0)
//   y[o] = sum_g scale[o,g] * ( sum_{b in g} d_b * sum_{j in b} code[o,j] q_j
//                               - zero[o,g] * sum_{b in g} d_b * sum_{j in b} q_j )
// i.e. float32 x replaced by d_b q_j and nothing else: |y - x W^T| <= sum_b (d_b / 2) sum_{j in b}
// |w_oj| (low_bit_int8_error_bound), plus float32 summation noise.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

#include "ops/low_bit_weight.h"

namespace rqat::ops {

// x rounded to 8 bits per block of 32, in the order the kernel reads a block's codes for `bits`
// (each block's 32 values permuted to match how a 256-bit register unpacks the block's words).
struct Int8Activations {
  at::Tensor values;      // int8 (rows, blocks * 32), permuted within each block
  at::Tensor scales;      // float32 (rows, blocks): d_b
  at::Tensor group_sums;  // float32 (rows, groups): sum_{b in g} d_b * sum_j q_j (the zero term)
};

// `padded`: float32 (rows, groups * blocks_per_group * 32), x in kernel column order with each
// group zero-padded to whole blocks (as the float kernel takes it).
Int8Activations quantize_activations_int8(const at::Tensor& padded, const LowBitWeight& weight);

// The kernel's plain reference: the formula above, one scalar loop per output, codes unpacked
// with unpack_low_bit_codes and activations unpermuted. float32 (rows, out).
at::Tensor low_bit_matmul_int8_reference(const at::Tensor& padded, const LowBitWeight& weight);

// What rounding x to 8-bit blocks can change in each output, sum_b (d_b / 2) sum_{j in b} |w_oj|:
// float32 (rows, out), for `padded` as above.
at::Tensor low_bit_int8_error_bound(const at::Tensor& padded, const LowBitWeight& weight);

// y (rows, out) float32 = the formula above, for 2-4 bit weights. AVX2 where ops/cpu_target.h says
// the CPU has it (avx2 or avx512), else the baseline's 4-lane kernel
// (ops/low_bit_matmul_narrow_kernel.h) with the same integer sums (results equal within float32
// summation order).
// OpenMP (ATen's parallel_for) over output rows, tiles of up to 4 rows of x per pass over a row's
// codes. The AVX2 kernel reads the weight's exact float16 copies of its scales and zeros where
// float16 holds them (LowBitHalfScales, made at the first call) unless use_half_scales is false
// (tests: the results are the same either way); `portable` runs the baseline's kernel of CPUs
// without AVX2 (tests, on machines that have it).
at::Tensor low_bit_matmul_int8(const at::Tensor& padded, const LowBitWeight& weight,
                               bool use_half_scales = true, bool portable = false);

}  // namespace rqat::ops
