// Launcher of the packed low-bit GEMV for decode (lib/ops/low_bit_matmul.h has the maths, the
// layout is lib/ops/low_bit_weight.h). Raw pointers, sizes and a stream only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rqat::cuda {

inline constexpr int64_t kLowBitGemvMaxRows = 16;

// x: (rows, x_stride) float32, each group's columns zero-padded to whole blocks of 32 (x_stride =
// groups * blocks_per_group * 32); xsum: (rows, groups) float32 sums of each group's x; codes:
// (out, words_per_row) packed words; scales, zeros: (out, groups) float32; y: (rows, out) float32.
// rows in [1, kLowBitGemvMaxRows]; bits 2, 3, 4 or 8. Returns a cudaError_t (0 on success).
int launch_low_bit_gemv(const float* x, const float* xsum, int64_t rows, int64_t x_stride,
                        const uint32_t* codes, const float* scales, const float* zeros,
                        int64_t out, int64_t groups, int64_t blocks_per_group,
                        int64_t words_per_row, int bits, float* y, cudaStream_t stream);

}  // namespace rqat::cuda
