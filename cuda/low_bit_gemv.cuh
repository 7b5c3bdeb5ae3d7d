// Launcher of the packed low-bit GEMV for decode (lib/ops/low_bit_matmul.h has the maths, the
// layout is lib/ops/low_bit_weight.h, what each thread computes is cuda/low_bit_gemv_lanes.cuh).
// Raw pointers, sizes and a stream only.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/low_bit_gemv_lanes.cuh"

namespace rqat::cuda {

// y = x W^T for a.rows in [1, kLowBitGemvMaxRows] rows of x, bits 2, 3, 4 or 8, x and y float32 or
// bfloat16 (see LowBitGemvArgs). One kernel launch; returns a cudaError_t (0 on success).
int launch_low_bit_gemv(const LowBitGemvArgs& a, cudaStream_t stream);

}  // namespace rqat::cuda
