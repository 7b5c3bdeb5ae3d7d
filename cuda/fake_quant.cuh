// Launcher of the group-wise fake-quantization kernel (see lib/ops/fake_quant.h for the maths and
// the checked entry point). Raw pointers, sizes and a stream only: this layer knows nothing of
// models.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rqat::cuda {

enum class FakeQuantDType { kF32, kBF16 };

// w, out: (rows, cols) of `dtype`, row-major; scales, zeros: (rows, cols / group_size) float32.
// Returns a cudaError_t (0 on success).
int launch_fake_quant_groupwise(const void* w, void* out, const float* scales, const float* zeros,
                                int64_t rows, int64_t cols, int64_t group_size, int bits,
                                FakeQuantDType dtype, cudaStream_t stream);

}  // namespace rqat::cuda
