// The end of both packed GEMV kernels (cuda/low_bit_gemv.cu, cuda/low_bit_gemv_wide.cu): every
// thread holds partial sums acc[R][Rows] of the CTA's R output rows and Rows rows of x; a butterfly
// of warp shuffles per accumulator, then the warps' sums from shared memory in warp order, and each
// finished y[r, o0 + i] stored in x's dtype. CUDA only (the lanes' part is tested on the CPU).
#pragma once

#include "cuda/low_bit_gemv_lanes.cuh"

namespace rqat::cuda {

template <int R, int Rows, int MaxWarps, typename In>
__device__ __forceinline__ void store_cta_row_sums(const LowBitGemvArgs& a, int64_t o0,
                                                   const float (&acc)[R][Rows]) {
  constexpr int kSums = R * Rows;
  __shared__ float warp_sums[MaxWarps][kSums];
  const int warps = blockDim.x >> 5;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float v = acc[i][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[warp][i * Rows + r] = v;
    }
  __syncthreads();
  for (int k = threadIdx.x; k < kSums; k += blockDim.x) {
    const int64_t o = o0 + k / Rows;
    const int64_t r = k % Rows;
    if (o >= a.out || r >= a.rows) continue;
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += warp_sums[w][k];
    store_output<In>(a, o, r, sum);
  }
}

}  // namespace rqat::cuda
