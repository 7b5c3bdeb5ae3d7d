// Launchers of the fake-quantization forward kernel (see lib/ops/fake_quant.h and
// lib/ops/fake_quant_ste.h for the maths and the checked entry points). Raw pointers, sizes and a
// stream only: this layer knows nothing of models.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rqat::cuda {

enum class FakeQuantDType { kF32, kBF16 };

// w, out: (rows, cols) of `dtype`, row-major; scales, zeros: (rows, cols / group_size) float32;
// column c uses group c / group_size. Returns a cudaError_t (0 on success).
int launch_fake_quant_groupwise(const void* w, void* out, const float* scales, const float* zeros,
                                int64_t rows, int64_t cols, int64_t group_size, int bits,
                                FakeQuantDType dtype, cudaStream_t stream);

// The same quantize-dequantize with an arbitrary column -> group map (act-order GPTQ): column c
// uses group g_idx[c] in [0, groups) (an entry outside stops the kernel: cudaErrorLaunchFailure
// or similar at the next synchronization). w, out: (rows, cols) float32; scales, zeros: (rows,
// groups) float32; max_code = 2^bits - 1. Returns a cudaError_t (0 on success).
int launch_fake_quant_indexed(const float* w, float* out, const float* scales, const float* zeros,
                              const int32_t* g_idx, int64_t rows, int64_t cols, int64_t groups,
                              int64_t max_code, cudaStream_t stream);

}  // namespace rqat::cuda
