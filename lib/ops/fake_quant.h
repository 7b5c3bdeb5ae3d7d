// Group-wise uniform fake quantization (quantize, then dequantize) of a weight matrix, the
// operation at the heart of GPTQ/RTN evaluation and QAT:
//   q = clamp(round_half_even(w / scale) + zero, 0, 2^bits - 1),  w' = (q - zero) * scale
// with one (scale, zero) per row and group of `group_size` consecutive input columns.
#pragma once

#include <ATen/Tensor.h>

namespace rqat::ops {

// w: (out, in) float32 or bfloat16, on the CPU or CUDA; scales, zeros: (out, in / group_size)
// float32 on w's device, scales > 0, zeros integral. group_size <= 0 means one group per row.
// Returns w' in w's dtype; arithmetic is float32, so every path gives bit-identical results. On
// CUDA it runs the kernel of cuda/fake_quant.cu unless ops/kernel_choice.h chooses the twin (the
// ATen composite every other device runs).
at::Tensor fake_quantize_groupwise(const at::Tensor& w, const at::Tensor& scales,
                                   const at::Tensor& zeros, int bits, int64_t group_size);

// The CUDA kernel itself (a CUDA build and CUDA tensors; the self-check and tests call it).
at::Tensor fake_quantize_groupwise_cuda(const at::Tensor& w, const at::Tensor& scales,
                                        const at::Tensor& zeros, int bits, int64_t group_size);

// Plain loops over CPU tensors: the reference the ATen path and the CUDA kernel are tested against.
at::Tensor fake_quantize_groupwise_ref(const at::Tensor& w, const at::Tensor& scales,
                                       const at::Tensor& zeros, int bits, int64_t group_size);

}  // namespace rqat::ops
