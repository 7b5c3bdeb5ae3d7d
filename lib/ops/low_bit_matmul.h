// y = x W^T with W kept packed (ops/low_bit_weight.h): the matmul of quantized linear layers that
// stay 2-4 (or 8) bits in memory, as GPTQModel's and vLLM's Marlin/ExLlama kernels and llama.cpp's
// CPU kernels compute. The bias, if any, is the caller's.
//
// low_bit_matmul dispatches on the device and the number of rows of x:
//   CPU, rows <= low_bit_gemm_rows() the packed kernel (ops/low_bit_matmul_kernel.h, reading each
//                                    weight once per tile of rows of x);
//   CPU, more rows                   low_bit_matmul_cpu_gemm: tiles of weight rows dequantized by
//                                    the kernel's decode into a cache-sized buffer, each then one
//                                    GEMM (libtorch's) with all rows of x: prefill and batches;
//   CPU, int8 activations            the int8 kernel (ops/low_bit_matmul_int8_kernel.h) up to
//                                    low_bit_int8_rows() rows, the GEMM path beyond;
//   CUDA, rows <= 16                 the packed GEMV when built with CUDA: the wide one
//                                    (cuda/low_bit_gemv_wide.cuh) for 1-4 rows of whole 16-byte
//                                    steps, else cuda/low_bit_gemv.cuh;
//   otherwise                        low_bit_matmul_dense: the weight dequantized once for the
//                                    call, then a dense matmul (a GPU's prefill).
// The kernels run only where ops/kernel_choice.h allows (--kernels; checked at first use in
// auto); low_bit_matmul_dense, built from PyTorch's operators only, is their twin.
// low_bit_matmul_ref is the plain reference both kernels are tested against: dequantize, then
// matmul in float32.
#pragma once

#include <ATen/Tensor.h>

#include "io/enum_names.h"
#include "ops/low_bit_weight.h"

namespace rqat::ops {

inline constexpr int64_t kLowBitKernelRows = 64;
// Above this many rows the CPU's float path is a GEMM over dequantized tiles: where the tiles
// overtake the kernel on a 4096-square W4/W2 layer (docs/performance.md, "Packed low-bit models on
// every CPU" and "the baseline target's 2-4-bit code"): 64 rows with AVX-512, 32 with AVX2, 16 on
// the baseline, whose kernels have 16, 8 and 4 lanes.
inline constexpr int64_t kLowBitGemmRows = 64;
inline constexpr int64_t kLowBitGemmRowsAvx2 = 32;
inline constexpr int64_t kLowBitGemmRowsBaseline = 16;
// The threshold of the CPU target the kernels run now (ops/cpu_target.h).
int64_t low_bit_gemm_rows();
// The int8 kernel's: kLowBitKernelRows with its AVX2 code (avx2, avx512), which is about twice the
// float kernel's speed; on the baseline, whose int8 and float code are the same 4-lane kernel,
// low_bit_gemm_rows().
int64_t low_bit_int8_rows();
// A tile of dequantized weights: at most this many floats (256 KiB: stays in L2 while the GEMM
// reads it).
inline constexpr int64_t kLowBitGemmTileFloats = 64 * 1024;

// What the CPU kernel multiplies 2-4 bit codes with (a process-wide runtime option,
// cli/runtime_flags.h: --low-bit-activations):
//   float  x as it is, weights dequantized to float32 (exact to float32 rounding; the default);
//   int8   x rounded to 8 bits per block of 32 columns first, then integer dot products
//          (ops/low_bit_matmul_int8_kernel.h): llama.cpp's arithmetic, several times faster at
//          batch 1, off by at most low_bit_int8_error_bound.
// 8-bit weights and the CUDA GEMV always take float activations.
enum class LowBitActivations { kFloat, kInt8, kCount };
constexpr EnumNames<LowBitActivations> enum_names(LowBitActivations) { return {"float", "int8"}; }
LowBitActivations low_bit_activations();
void set_low_bit_activations(LowBitActivations activations);

// The kernels' error measure and tolerance (their tests', and their self-check's): the largest
// |y - y_ref| relative to low_bit_error_scale, the sum |x| |w| of each output (at least 1e-3):
// float32 summation order for float32 inputs, one rounding of the output for 16-bit ones.
inline constexpr double kLowBitMatmulTolerance = 1e-5;
inline constexpr double kLowBitMatmulTolerance16 = 1e-2;
at::Tensor low_bit_error_scale(const at::Tensor& x, const LowBitWeight& weight);

// x: (..., in_features) float32, bfloat16 or float16 on the weight's device. Returns (...,
// out_features) in x's dtype (float32 accumulation).
at::Tensor low_bit_matmul(const at::Tensor& x, const LowBitWeight& weight);
at::Tensor low_bit_matmul_ref(const at::Tensor& x, const LowBitWeight& weight);
// The dense path (and the kernels' twin): the weight dequantized to x's dtype, then at::matmul.
at::Tensor low_bit_matmul_dense(const at::Tensor& x, const LowBitWeight& weight);

// The kernels themselves, whatever the number of rows (tests, benchmarks and the self-check):
// the CPU kernel, and the CUDA GEMV (at most 16 rows; a CUDA build).
at::Tensor low_bit_matmul_cpu_kernel(const at::Tensor& x, const LowBitWeight& weight);
// The CPU's many-row path, whatever the number of rows.
at::Tensor low_bit_matmul_cpu_gemm(const at::Tensor& x, const LowBitWeight& weight);
// The int8 CPU kernel (2-4 bits), and its tests' measure: |y - x W^T| relative to
// low_bit_int8_error_scale, the bound of rounding x to 8-bit blocks plus the float kernel's
// tolerance (float32 or 16-bit x) times low_bit_error_scale, within kLowBitInt8Tolerance.
at::Tensor low_bit_matmul_cpu_int8_kernel(const at::Tensor& x, const LowBitWeight& weight);
inline constexpr double kLowBitInt8Tolerance = 1.0;
at::Tensor low_bit_int8_error_scale(const at::Tensor& x, const LowBitWeight& weight);
at::Tensor low_bit_matmul_cuda_kernel(const at::Tensor& x, const LowBitWeight& weight);

}  // namespace rqat::ops
