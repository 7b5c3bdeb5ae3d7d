// See low_bit_gemv_wide.cuh. The threads' work is cuda/low_bit_gemv_wide_lanes.cuh (tested on the
// CPU too); here only the launch and the CTA's sum over its threads (cuda/cta_row_sums.cuh).
#include "cuda/low_bit_gemv_wide.cuh"

#include "cuda/cta_row_sums.cuh"

namespace rqat::cuda {
namespace {

template <int Bits, int Rows, typename In>
__global__ void __launch_bounds__(kWideThreads) low_bit_gemv_wide_kernel(const LowBitGemvArgs a) {
  float acc[kWideRows<Bits>][Rows];
  wide_thread_partial_sums<Bits, Rows, In>(a, blockIdx.x, threadIdx.x, acc);
  store_cta_row_sums<kWideRows<Bits>, Rows, kWideThreads / 32, In>(
      a, static_cast<int64_t>(blockIdx.x) * kWideRows<Bits>, acc);
}

struct LaunchWide {
  const LowBitGemvArgs& a;
  cudaStream_t stream;
  template <int Bits, int Rows, typename In>
  int run() const {
    const int64_t ctas = wide_ctas(a);
    if (ctas > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    low_bit_gemv_wide_kernel<Bits, Rows, In>
        <<<static_cast<unsigned>(ctas), wide_geometry(a).threads(), 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace

int launch_low_bit_gemv_wide(const LowBitGemvArgs& a, cudaStream_t stream) {
  return visit_low_bit_gemv_wide(a, LaunchWide{a, stream}, static_cast<int>(cudaErrorInvalidValue));
}

}  // namespace rqat::cuda
