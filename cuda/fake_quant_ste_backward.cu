// Backward kernel of the clipped straight-through estimator: one thread per weight on a 2-D grid
// (rows along y, columns along x, both grid-strided). The codes are recomputed with the forward's
// float32 operations (IEEE division, rintf) so that the in-range decision is the CPU's, bit for
// bit.
#include "cuda/fake_quant_ste_backward.cuh"

namespace rqat::cuda {

namespace {

__global__ void fake_quant_ste_backward_kernel(
    const float* __restrict__ grad_wq, const float* __restrict__ w, float* __restrict__ grad_w,
    const float* __restrict__ scales, const float* __restrict__ zeros,
    const int32_t* __restrict__ g_idx, int64_t rows, int64_t cols, int64_t groups, float max_q) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
         col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t group = g_idx[col];
      if (group < 0 || group >= groups) __trap();  // never read another row's scales
      const int64_t i = row * cols + col, g = row * groups + group;
      const float code = rintf(__fdiv_rn(w[i], scales[g])) + zeros[g];
      // Written as "not outside" so that a NaN code passes the gradient, as the ATen path does.
      const bool outside = code < 0.0f || code > max_q;
      grad_w[i] = outside ? 0.0f : grad_wq[i];
    }
  }
}

}  // namespace

int launch_fake_quant_ste_backward(const float* grad_wq, const float* w, float* grad_w,
                                   const float* scales, const float* zeros, const int32_t* g_idx,
                                   int64_t rows, int64_t cols, int64_t groups, int64_t max_code,
                                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  constexpr int kThreads = 256;
  const int64_t x = (cols + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(x < 1024 ? x : 1024),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  fake_quant_ste_backward_kernel<<<grid, kThreads, 0, stream>>>(
      grad_wq, w, grad_w, scales, zeros, g_idx, rows, cols, groups, static_cast<float>(max_code));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace rqat::cuda
