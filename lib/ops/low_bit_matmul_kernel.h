// The CPU kernel of low_bit_matmul (ops/low_bit_matmul.h): y = x W^T for up to a few dozen rows
// of x, reading the packed codes of ops/low_bit_weight.h once per tile of 16 rows.
#pragma once

#include <cstdint>

namespace rqat::ops {

struct LowBitKernelArgs {
  // x in kernel column order, each group zero-padded to whole blocks of 32: (batch, x_stride)
  // with x_stride = groups * blocks_per_group * 32; xsum (batch, groups): each group's sum of x.
  const float* x = nullptr;
  const float* xsum = nullptr;
  int64_t batch = 0, x_stride = 0;
  const uint32_t* codes = nullptr;  // (out, words_per_row)
  const float* scales = nullptr;    // (out, groups)
  const float* zeros = nullptr;     // (out, groups)
  // Their exact float16 copies (ops/low_bit_weight.h's exact_half_scales), or null: the AVX2 code
  // reads these where given (fewer bytes, the same values).
  const uint16_t* scales16 = nullptr;
  const uint16_t* zeros16 = nullptr;
  // Every zero is zeros[0] (a symmetric weight, ops/low_bit_weight.h's low_bit_zeros_shared): the
  // AVX2 codes (float, and the int8 kernel's) read that one instead of a zero per group, the same
  // values; the others read zeros, which stays complete (in the per-group scalar loads of the
  // AVX-512 and baseline codes the choice cost more than it saved).
  bool zeros_shared = false;
  int64_t out = 0, groups = 0, blocks_per_group = 0, words_per_row = 0;
  int bits = 4;
  float* y = nullptr;  // (batch, out)
  // x again in the order the AVX2 4-bit code and the baseline's 2-4-bit code decode codes, each
  // value scaled by the power of two that cancels its code's bit position
  // (ops/low_bit_decode_order.h), which those codes require: low_bit_matmul_cpu makes it (the int8
  // kernel, its q); null for every other code.
  const float* x_decode_order = nullptr;
  // int8 activations in the baseline's kernel (ops/low_bit_matmul_narrow_kernel.h): each block's
  // d_b (batch, x_stride / 32), x_decode_order then holding the rounded q; null otherwise.
  const float* block_scales = nullptr;
};

// How far ahead of the block it decodes each CPU kernel asks for the codes it will read next
// (2 KiB): at batch 1 every weight comes from memory once, and without the hint the kernels waited
// on their code loads (a third of the AVX2 GEMV's samples sat on that load) while the hardware's
// prefetcher alone kept well behind what dense GEMVs stream. Measured on the 4-layer 4096-wide W4
// g32 model at 2 threads (docs/performance.md, 2026-12-06): avx2 decode +60% (float) and +50%
// (int8); the AVX-512 float code and the baseline's within noise to +5%. 256 to 2,048 words ahead
// were within noise of each other, 64 too few. A row's last hints reach into the
// next row's codes, which the same task reads next (a prefetch of any address is harmless).
inline constexpr int64_t kLowBitPrefetchWords = 512;
inline void prefetch_codes_ahead(const uint32_t* codes) {
  __builtin_prefetch(codes + kLowBitPrefetchWords, /*read*/ 0, /*keep in all levels*/ 3);
}

// Dequantizes in registers, 16 codes at a time (2-4 bits: a table of the group's (code - zero) *
// scale; 8 bits: scale * (sum_j x_j code_j - zero * sum_j x_j) per group), float32 accumulation;
// OpenMP (ATen's parallel_for) over output rows.
void low_bit_matmul_cpu(const LowBitKernelArgs& args);

// Weight rows [begin, end) dequantized into `out` ((end - begin) rows of x_stride floats, in kernel
// column order; a padding column holds its padding code's value, to be multiplied with x's zeros):
// (code - zero) * scale, the reference's weights bit for bit, decoded as the kernel decodes them.
// For the many-row path (low_bit_matmul.h): tiles of weights made here, then a GEMM. x, xsum,
// batch and y of `args` are not read.
void low_bit_dequantize_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end, float* out);

}  // namespace rqat::ops
