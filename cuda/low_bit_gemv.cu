// See low_bit_gemv.cuh. The threads' work is cuda/low_bit_gemv_lanes.cuh (tested on the CPU too);
// here only the launch and the CTA's sum over its threads: a butterfly of warp shuffles per
// accumulator, then the warps' sums from shared memory, in warp order.
#include "cuda/low_bit_gemv.cuh"

namespace rqat::cuda {
namespace {

template <int Bits, int Rows, typename In>
__global__ void __launch_bounds__(kGemvThreads) low_bit_gemv_kernel(const LowBitGemvArgs a) {
  float acc[kGemvRowsPerCta][Rows];
  thread_partial_sums<Bits, Rows, In>(a, blockIdx.x, threadIdx.x, acc);

  constexpr int kMaxWarps = kGemvThreads / 32, kSums = kGemvRowsPerCta * Rows;
  __shared__ float warp_sums[kMaxWarps][kSums];
  const int warps = blockDim.x >> 5;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kGemvRowsPerCta; ++i)
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float v = acc[i][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[warp][i * Rows + r] = v;
    }
  __syncthreads();
  for (int k = threadIdx.x; k < kSums; k += blockDim.x) {
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvRowsPerCta + k / Rows;
    const int64_t r = k % Rows;
    if (o >= a.out || r >= a.rows) continue;
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += warp_sums[w][k];
    store_output<In>(a, o, r, sum);
  }
}

struct Launch {
  const LowBitGemvArgs& a;
  cudaStream_t stream;
  template <int Bits, int Rows, typename In>
  int run() const {
    const int64_t ctas = a.ctas();
    if (ctas > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    low_bit_gemv_kernel<Bits, Rows, In><<<static_cast<unsigned>(ctas), a.threads(), 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace

int launch_low_bit_gemv(const LowBitGemvArgs& a, cudaStream_t stream) {
  return visit_low_bit_gemv(a, Launch{a, stream}, static_cast<int>(cudaErrorInvalidValue));
}

}  // namespace rqat::cuda
