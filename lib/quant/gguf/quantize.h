// llama.cpp's reference quantization of one GGUF block (what llama-quantize writes for a tensor
// without an importance matrix), and the packing of the K-quants' 6-bit sub-block scales. The
// searches follow ggml-quants.c's: for Q8_0/Q4_0/Q4_1 one scale from the block's extremes; for
// the K-quants a scale (and min) per sub-block chosen by a weighted least-squares search over a
// few candidate grids, then those scales quantized against the super-block's largest, then every
// code chosen again on the stored (fp16 x integer) scales. Float operations are done in the same
// order as there, so that the codes agree except where a compiler fused a multiply-add in a build
// of llama.cpp (this file is compiled without contraction).
#pragma once

#include <cstdint>

#include "io/gguf_file.h"

namespace rqat::quant {

// x: one block of the type (32 or 256 values); writes its block_bytes to out.
void quantize_gguf_block(io::GgufType type, const float* x, uint8_t* out);

// One row of n values (whole blocks) into n / block blocks. importance: nullptr (the reference
// quantization, block by block), or n non-negative weights, one per input column: llama.cpp's
// quantization with an importance matrix (ggml_quantize_chunk with imatrix; llama-quantize
// --imatrix), whose searches weight value j by importance[j] * sqrt(sigma2 + x_j^2) (sigma2 the
// row's mean square for Q4_0/Q4_1, the super-block's, doubled but for Q2_K, for the K-quants;
// Q6_K takes importance[j] as it is) and choose the K-quants' sub-block scales by weighted fits
// too. Q8_0 ignores it, as llama.cpp does.
void quantize_gguf_row(io::GgufType type, const float* x, int64_t n, const float* importance,
                       uint8_t* out);

// Sub-block j (0..7) of Q4_K/Q5_K: its 6-bit scale and min from the 12 packed bytes, and back.
void unpack_k_scale_min(const uint8_t* packed, int j, int& scale, int& min);
void pack_k_scale_min(uint8_t* packed, int j, int scale, int min);
// Sub-block j (0..15) of Q3_K: its 6-bit scale (-32..31) from the 12 packed bytes, and back (ORed
// into bytes that start at zero).
int unpack_q3_k_scale(const uint8_t* packed, int j);
void pack_q3_k_scale(uint8_t* packed, int j, int scale);

}  // namespace rqat::quant
