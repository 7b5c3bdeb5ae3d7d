// One call of the packed low-bit GEMV kernel (cuda/low_bit_gemv.cuh), made from tensors: x in
// kernel column order and in a dtype the kernel reads, the output allocated, every operand named so
// it outlives the asynchronous kernel, and the kernel's raw arguments. Device-agnostic: the CUDA
// dispatcher (ops/low_bit_matmul.cpp) launches it, tests/test_low_bit_gemv_lanes.cpp runs the same
// call's threads on the CPU.
#pragma once

#include <ATen/Tensor.h>

#include "cuda/low_bit_gemv_lanes.cuh"
#include "ops/low_bit_weight.h"

namespace rqat::ops {

struct LowBitGemvCall {
  at::Tensor x;                     // (rows, in) kernel column order, float32 or bfloat16
  at::Tensor y;                     // (rows, out), x's dtype
  at::Tensor codes, scales, zeros;  // the weight's, contiguous
  cuda::LowBitGemvArgs args;
};

// x: (..., in_features) on the weight's device with at most cuda::kLowBitGemvMaxRows rows.
// Act-order columns are gathered here (index_select); other dtypes than float32 and bfloat16 are
// converted to float32.
LowBitGemvCall prepare_low_bit_gemv(const at::Tensor& x, const LowBitWeight& weight);

}  // namespace rqat::ops
