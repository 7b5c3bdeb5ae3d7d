// Launcher of the backward kernel of the fake-quantized weight with frozen scales (see
// lib/ops/fake_quant_ste.h for the maths and the checked entry point). Raw pointers, sizes and a
// stream only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rqat::cuda {

// grad_w[r, c] = grad_wq[r, c] where round(w / s) + z lies in [0, max_code], else 0, with (s, z) =
// (scales, zeros)[r, g_idx[c]]. grad_wq, w, grad_w: (rows, cols) float32 row-major; scales, zeros:
// (rows, groups) float32; g_idx: (cols) int32 in [0, groups) (an entry outside stops the kernel).
// Returns a cudaError_t (0 on success).
int launch_fake_quant_ste_backward(const float* grad_wq, const float* w, float* grad_w,
                                   const float* scales, const float* zeros, const int32_t* g_idx,
                                   int64_t rows, int64_t cols, int64_t groups, int64_t max_code,
                                   cudaStream_t stream);

}  // namespace rqat::cuda
