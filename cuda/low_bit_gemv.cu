// See low_bit_gemv.cuh. One warp per output row (grid-stride): lane l takes the blocks of 32 codes
// l, l + 32, ... of the row, so a warp reads 32 consecutive blocks (32 x bits words) per step,
// coalesced, and every packed word is read once per launch. A lane decodes its 32 codes with shifts
// (the layout of lib/ops/low_bit_weight.h), multiplies them with the same 32 columns of each row of
// x (small, served from L1/L2), and adds scale * dot; the lane that holds a group's first block also
// subtracts scale * zero * sum(x of the group). Accumulation in float32; a warp shuffle sums the
// lanes. Rows of x are a template parameter so the accumulators stay in registers.
#include "cuda/low_bit_gemv.cuh"

namespace rqat::cuda {
namespace {

template <int Bits>
__device__ __forceinline__ uint32_t code_at(const uint32_t* w, int k) {
  if constexpr (Bits == 3) {
    return ((w[k >> 4] >> (2 * (k & 15))) & 3u) | (((w[2] >> k) & 1u) << 2);
  } else if constexpr (Bits == 4) {
    const int j = k & 15;
    return (w[2 * (k >> 4) + (j & 1)] >> (4 * (j >> 1))) & 15u;
  } else {
    const int bit = k * Bits;
    return (w[bit >> 5] >> (bit & 31)) & ((1u << Bits) - 1u);
  }
}

template <int Bits, int Rows>
__global__ void low_bit_gemv_kernel(const float* __restrict__ x, const float* __restrict__ xsum,
                                    int64_t x_stride, const uint32_t* __restrict__ codes,
                                    const float* __restrict__ scales,
                                    const float* __restrict__ zeros, int64_t out, int64_t groups,
                                    int64_t blocks_per_group, int64_t words_per_row,
                                    float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const int64_t blocks = groups * blocks_per_group;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       o < out; o += warps) {
    float acc[Rows];
#pragma unroll
    for (int r = 0; r < Rows; ++r) acc[r] = 0.f;
    const uint32_t* row = codes + o * words_per_row;
    for (int64_t b = lane; b < blocks; b += 32) {
      uint32_t w[Bits];
#pragma unroll
      for (int i = 0; i < Bits; ++i) w[i] = __ldg(row + b * Bits + i);
      const int64_t g = b / blocks_per_group;
      const float scale = __ldg(scales + o * groups + g);
      float dot[Rows];
#pragma unroll
      for (int r = 0; r < Rows; ++r) dot[r] = 0.f;
#pragma unroll
      for (int k = 0; k < 32; ++k) {
        const float c = static_cast<float>(code_at<Bits>(w, k));
#pragma unroll
        for (int r = 0; r < Rows; ++r) dot[r] = fmaf(c, __ldg(x + r * x_stride + b * 32 + k), dot[r]);
      }
      const bool first_of_group = b % blocks_per_group == 0;
      const float zero = first_of_group ? __ldg(zeros + o * groups + g) : 0.f;
#pragma unroll
      for (int r = 0; r < Rows; ++r)
        acc[r] += scale * (dot[r] - (first_of_group ? zero * __ldg(xsum + r * groups + g) : 0.f));
    }
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      float v = acc[r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
      if (lane == 0) y[r * out + o] = v;
    }
  }
}

template <int Bits, int Rows>
int launch_rows(const float* x, const float* xsum, int64_t x_stride, const uint32_t* codes,
                const float* scales, const float* zeros, int64_t out, int64_t groups,
                int64_t blocks_per_group, int64_t words_per_row, float* y, cudaStream_t stream) {
  constexpr int kThreads = 256;  // 8 warps, 8 output rows per CTA step
  const int64_t wanted = (out + 7) / 8;
  const int grid = static_cast<int>(wanted < 65535 ? wanted : 65535);
  low_bit_gemv_kernel<Bits, Rows><<<grid, kThreads, 0, stream>>>(
      x, xsum, x_stride, codes, scales, zeros, out, groups, blocks_per_group, words_per_row, y);
  return static_cast<int>(cudaGetLastError());
}

template <int Bits>
int launch_bits(int64_t rows, const float* x, const float* xsum, int64_t x_stride,
                const uint32_t* codes, const float* scales, const float* zeros, int64_t out,
                int64_t groups, int64_t blocks_per_group, int64_t words_per_row, float* y,
                cudaStream_t stream) {
#define RQAT_ROWS_CASE(R)                                                                       \
  case R:                                                                                       \
    return launch_rows<Bits, R>(x, xsum, x_stride, codes, scales, zeros, out, groups,           \
                                blocks_per_group, words_per_row, y, stream);
  switch (rows) {
    RQAT_ROWS_CASE(1) RQAT_ROWS_CASE(2) RQAT_ROWS_CASE(3) RQAT_ROWS_CASE(4)
    RQAT_ROWS_CASE(5) RQAT_ROWS_CASE(6) RQAT_ROWS_CASE(7) RQAT_ROWS_CASE(8)
    RQAT_ROWS_CASE(9) RQAT_ROWS_CASE(10) RQAT_ROWS_CASE(11) RQAT_ROWS_CASE(12)
    RQAT_ROWS_CASE(13) RQAT_ROWS_CASE(14) RQAT_ROWS_CASE(15) RQAT_ROWS_CASE(16)
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
#undef RQAT_ROWS_CASE
}

}  // namespace

int launch_low_bit_gemv(const float* x, const float* xsum, int64_t rows, int64_t x_stride,
                        const uint32_t* codes, const float* scales, const float* zeros,
                        int64_t out, int64_t groups, int64_t blocks_per_group,
                        int64_t words_per_row, int bits, float* y, cudaStream_t stream) {
  switch (bits) {
    case 2:
      return launch_bits<2>(rows, x, xsum, x_stride, codes, scales, zeros, out, groups,
                            blocks_per_group, words_per_row, y, stream);
    case 3:
      return launch_bits<3>(rows, x, xsum, x_stride, codes, scales, zeros, out, groups,
                            blocks_per_group, words_per_row, y, stream);
    case 4:
      return launch_bits<4>(rows, x, xsum, x_stride, codes, scales, zeros, out, groups,
                            blocks_per_group, words_per_row, y, stream);
    case 8:
      return launch_bits<8>(rows, x, xsum, x_stride, codes, scales, zeros, out, groups,
                            blocks_per_group, words_per_row, y, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace rqat::cuda
