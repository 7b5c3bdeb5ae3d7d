// Group-wise fake quantization kernel: one thread per weight, float32 arithmetic with IEEE division
// and round-half-even (rintf) so results match the CPU reference bit for bit.
#include <cuda_bf16.h>

#include "cuda/fake_quant.cuh"

namespace rqat::cuda {

namespace {

__device__ __forceinline__ float load_as_float(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load_as_float(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store_float(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store_float(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

template <typename T>
__global__ void fake_quant_groupwise_kernel(const T* __restrict__ w, T* __restrict__ out,
                                            const float* __restrict__ scales,
                                            const float* __restrict__ zeros, int64_t rows,
                                            int64_t cols, int64_t group_size, float max_q) {
  const int64_t total = rows * cols;
  const int64_t groups = cols / group_size;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / cols, col = i - row * cols;
    const int64_t g = row * groups + col / group_size;
    const float s = scales[g], z = zeros[g];
    const float q = fminf(fmaxf(rintf(__fdiv_rn(load_as_float(w, i), s)) + z, 0.0f), max_q);
    store_float(out, i, (q - z) * s);
  }
}

template <typename T>
int launch(const void* w, void* out, const float* scales, const float* zeros, int64_t rows,
           int64_t cols, int64_t group_size, int bits, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t total = rows * cols;
  if (total == 0) return 0;
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  const int blocks =
      static_cast<int>(wanted < 65535 * 8 ? wanted : 65535 * 8);  // grid-stride beyond
  const float max_q = static_cast<float>((1 << bits) - 1);
  fake_quant_groupwise_kernel<T><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(w), static_cast<T*>(out), scales, zeros, rows, cols, group_size, max_q);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_fake_quant_groupwise(const void* w, void* out, const float* scales, const float* zeros,
                                int64_t rows, int64_t cols, int64_t group_size, int bits,
                                FakeQuantDType dtype, cudaStream_t stream) {
  switch (dtype) {
    case FakeQuantDType::kF32:
      return launch<float>(w, out, scales, zeros, rows, cols, group_size, bits, stream);
    case FakeQuantDType::kBF16:
      return launch<__nv_bfloat16>(w, out, scales, zeros, rows, cols, group_size, bits, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace rqat::cuda
