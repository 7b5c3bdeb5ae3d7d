// y = x W^T with W kept packed (ops/low_bit_weight.h): the matmul of quantized linear layers that
// stay 2-4 (or 8) bits in memory, as GPTQModel's and vLLM's Marlin/ExLlama kernels and llama.cpp's
// CPU kernels compute. The bias, if any, is the caller's.
//
// low_bit_matmul dispatches on the device and the number of rows of x:
//   CPU, rows <= kLowBitKernelRows   the packed kernel (ops/low_bit_matmul_kernel.h);
//   CUDA, rows <= 16                 the packed GEMV (cuda/low_bit_gemv.cuh), when built with CUDA;
//   otherwise                        the weight dequantized once for the call, then a dense matmul
//                                    (prefill of long prompts: compute-bound, where dense GEMM wins).
// low_bit_matmul_ref is the plain reference both kernels are tested against: dequantize, then
// matmul in float32.
#pragma once

#include <ATen/Tensor.h>

#include "ops/low_bit_weight.h"

namespace rqat::ops {

inline constexpr int64_t kLowBitKernelRows = 64;

// x: (..., in_features) float32, bfloat16 or float16 on the weight's device. Returns (...,
// out_features) in x's dtype (float32 accumulation).
at::Tensor low_bit_matmul(const at::Tensor& x, const LowBitWeight& weight);
at::Tensor low_bit_matmul_ref(const at::Tensor& x, const LowBitWeight& weight);

// The CPU kernel whatever the number of rows (tests and benchmarks).
at::Tensor low_bit_matmul_cpu_kernel(const at::Tensor& x, const LowBitWeight& weight);

}  // namespace rqat::ops
