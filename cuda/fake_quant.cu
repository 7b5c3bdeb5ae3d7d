// Fake quantization forward kernel: one thread per weight on a 2-D grid (rows along y, columns
// along x, both grid-strided, so no 64-bit division per element), float32 arithmetic with IEEE
// division and round-half-even (rintf) so results match the CPU bit for bit (NaN included). One
// kernel template serves contiguous groups (bf16 or float32) and act-order column -> group maps.
#include <cuda_bf16.h>

#include "cuda/fake_quant.cuh"

namespace rqat::cuda {

namespace {

__device__ __forceinline__ float load_as_float(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_as_float(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store_float(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_float(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// clamp(x, 0, max_q) with NaN passed through, as at::clamp does (fminf/fmaxf would drop it).
__device__ __forceinline__ float clamp_code(float x, float max_q) {
  return x < 0.0f ? 0.0f : (x > max_q ? max_q : x);
}

// Column -> group maps.
struct ContiguousGroups {
  int64_t group_size;
  __device__ __forceinline__ int64_t operator()(int64_t col) const { return col / group_size; }
};
struct IndexedGroups {
  const int32_t* g_idx;
  int64_t groups;
  __device__ __forceinline__ int64_t operator()(int64_t col) const {
    const int64_t g = g_idx[col];
    // Reading another row's scales would give plausible but wrong weights: stop instead.
    if (g < 0 || g >= groups) __trap();
    return g;
  }
};

template <typename T, typename GroupOf>
__global__ void fake_quant_kernel(const T* __restrict__ w, T* __restrict__ out,
                                  const float* __restrict__ scales, const float* __restrict__ zeros,
                                  int64_t rows, int64_t cols, int64_t groups, GroupOf group_of,
                                  float max_q) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
         col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i = row * cols + col, g = row * groups + group_of(col);
      const float s = scales[g], z = zeros[g];
      const float q = clamp_code(rintf(__fdiv_rn(load_as_float(w, i), s)) + z, max_q);
      store_float(out, i, (q - z) * s);
    }
  }
}

constexpr int kThreads = 256;

dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t x = (cols + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(x < 1024 ? x : 1024),
              static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

template <typename T, typename GroupOf>
int launch(const void* w, void* out, const float* scales, const float* zeros, int64_t rows,
           int64_t cols, int64_t groups, GroupOf group_of, float max_q, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  fake_quant_kernel<T, GroupOf><<<grid_for(rows, cols), kThreads, 0, stream>>>(
      static_cast<const T*>(w), static_cast<T*>(out), scales, zeros, rows, cols, groups, group_of,
      max_q);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_fake_quant_groupwise(const void* w, void* out, const float* scales, const float* zeros,
                                int64_t rows, int64_t cols, int64_t group_size, int bits,
                                FakeQuantDType dtype, cudaStream_t stream) {
  const float max_q = static_cast<float>((1 << bits) - 1);
  const int64_t groups = group_size > 0 ? cols / group_size : 1;
  const ContiguousGroups group_of{group_size};
  switch (dtype) {
    case FakeQuantDType::kF32:
      return launch<float>(w, out, scales, zeros, rows, cols, groups, group_of, max_q, stream);
    case FakeQuantDType::kBF16:
      return launch<__nv_bfloat16>(w, out, scales, zeros, rows, cols, groups, group_of, max_q,
                                   stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int launch_fake_quant_indexed(const float* w, float* out, const float* scales, const float* zeros,
                              const int32_t* g_idx, int64_t rows, int64_t cols, int64_t groups,
                              int64_t max_code, cudaStream_t stream) {
  return launch<float>(w, out, scales, zeros, rows, cols, groups, IndexedGroups{g_idx, groups},
                       static_cast<float>(max_code), stream);
}

}  // namespace rqat::cuda
