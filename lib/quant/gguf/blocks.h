// llama.cpp's weight formats (GGUF tensor types): rows of float32 values as blocks of codes with
// fp16 scales, and back. Q8_0, Q4_0 and Q4_1 are blocks of 32 values with one scale (and a min for
// Q4_1); the K-quants Q2_K..Q6_K are super-blocks of 256 values made of sub-blocks of 16 or 32
// whose scales (and mins) are themselves quantized to 4, 6 or 8 bits against fp16 super-block
// scales. For every type:
//
//   dequantize_gguf   the values llama.cpp reads, bit for bit as the gguf package's dequantizers
//                     compute them (float32, each product and difference rounded on its own, no
//                     fused multiply-add; this file is compiled with -ffp-contract=off);
//   quantize_gguf     llama.cpp's reference quantization of the type (what llama-quantize writes
//                     without an importance matrix; quant/gguf/quantize.h), or with one its
//                     importance-weighted quantization (llama-quantize --imatrix).
//
// Block layouts are in blocks.cpp; io/gguf_file.h has the block sizes.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>

#include "io/gguf_file.h"

namespace rqat::quant {

// x: rows x cols float32, row-major; cols a multiple of the type's block. Returns the tensor's
// bytes in `type` (f32, f16 and bf16 as IEEE values rounded to nearest even). importance: nullptr
// or cols weights, one per input column, the same for every row (quantize_gguf_row).
std::string quantize_gguf(io::GgufType type, const float* x, int64_t rows, int64_t cols,
                          const float* importance = nullptr);

// The inverse: `data` holds rows x cols values in `type`; writes them as float32 to out.
void dequantize_gguf(io::GgufType type, const char* data, int64_t rows, int64_t cols, float* out);

// The same on tensors: w of any float dtype, (..., cols) on any device (the work is on the CPU);
// the result float32 of the given shape on the CPU.
// importance: undefined, or (cols) non-negative finite values.
std::string quantize_gguf_tensor(io::GgufType type, const at::Tensor& w,
                                 const at::Tensor& importance = {});
at::Tensor dequantize_gguf_tensor(io::GgufType type, const std::string& data,
                                  at::IntArrayRef shape);

// Whether rows of `cols` values can be stored in `type` (a whole number of blocks).
bool gguf_row_fits(io::GgufType type, int64_t cols);

}  // namespace rqat::quant
