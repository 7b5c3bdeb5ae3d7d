// Launcher of the wide packed low-bit GEMV for batch-1 decoding (cuda/low_bit_gemv_wide_lanes.cuh
// has its design and what each thread computes). Raw pointers, sizes and a stream only.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/low_bit_gemv_wide_lanes.cuh"

namespace rqat::cuda {

// y = x W^T for a.rows in [1, kLowBitGemvWideMaxRows] when wide_gemv_applies(a); one kernel
// launch; returns a cudaError_t (0 on success; cudaErrorInvalidValue when the kernel does not
// apply).
int launch_low_bit_gemv_wide(const LowBitGemvArgs& a, cudaStream_t stream);

}  // namespace rqat::cuda
