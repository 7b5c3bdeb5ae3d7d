// Low-bit weights in the layout rqat's packed GEMV/GEMM kernels read (ops/low_bit_matmul.h), made
// once at load from any group-wise quantized weight (GPTQ checkpoints: quant/packed_gptq_linear.h).
//
//   W[o, i] = (code[o, i] - zero[o, g]) * scale[o, g],   g = the group of input i
//
// Layout. Input columns are put in kernel order first: column j of the kernel is input
// input_order[j] (act-order checkpoints list their columns group by group this way, so every
// group is one contiguous run of group_size columns; the last may be shorter). Each group is
// padded to whole blocks of 32 columns and every block of 32 codes of one output row takes `bits`
// int32 words:
//   2, 8 bits     little-endian fields: code k of the block is bits [k*bits, (k+1)*bits) of the
//                 block's bit stream (word k*bits/32);
//   4 bits        per half-block of 16 codes two words, word 2h the even codes and word 2h+1 the
//                 odd ones (code 16h + j is field j/2 of word 2h + j%2): one 64-bit broadcast then
//                 gives every lane its code's word in order;
//   3 bits        two planes: word 0 holds the low 2 bits of codes 0-15, word 1 those of codes
//                 16-31 (2 bits each, little-endian), word 2 the high bit of codes 0-31.
// So a row of one group is a whole number of words, a W3 weight takes exactly 3 bits a code, and
// a kernel decodes 16 codes from one or two words with lane-wise shifts. Padding codes are 0.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>

namespace rqat::ops {

// float16 copies of a weight's scales and zeros, made once at a CPU kernel's first call (the int8
// kernel, ops/low_bit_matmul_int8_kernel.h, and the float kernel's AVX2 code) where they hold the
// float32 values exactly, as GPTQ checkpoints' float16 scales and integer zeros do: the kernel then
// reads 4 bytes per group instead of 8 (a W4 g32 weight: 5 bits a weight instead of 6), with the
// same results.
// Made in the same way, for the AVX2 codes (float and int8): whether all the weight's zeros are
// one value, as symmetric quantization's are (GPTQ's default: 2^(bits-1) everywhere). They then
// read the one zero instead of a zero per group (2 bytes fewer per group: a W4 g32 weight with
// float16 scales reads 18 bytes per 32 weights instead of 20), with the same results.
struct LowBitHalfScales {
  std::once_flag made;
  at::Tensor scales, zeros;  // float16 (out, groups); undefined where float16 is not exact
  std::once_flag zeros_checked;
  bool zeros_shared = false;
};

struct LowBitWeight {
  int bits = 4;  // 2, 3, 4 or 8
  int64_t out_features = 0, in_features = 0;
  int64_t group_size = 0;  // columns per group (in_features: one group per row)
  at::Tensor codes;        // int32 (out, groups * blocks_per_group * bits), as above
  at::Tensor scales;       // float32 (out, groups)
  at::Tensor zeros;        // float32 (out, groups), in code units
  at::Tensor input_order;  // int64 (in): kernel column j reads input input_order[j]; undefined:
                           // the identity
  // Shared by copies of the weight (the same tensors); a weight moved to another device gets
  // its own.
  std::shared_ptr<LowBitHalfScales> half_scales = std::make_shared<LowBitHalfScales>();

  int64_t groups() const { return (in_features + group_size - 1) / group_size; }
  int64_t blocks_per_group() const { return (group_size + 31) / 32; }
  int64_t words_per_row() const { return groups() * blocks_per_group() * bits; }
  // Bytes of the codes, scales, zeros and order: what the layer keeps.
  int64_t bytes() const;
  LowBitWeight to(c10::Device device) const;
};

// The weight's float16 scales and zeros (made at the first call, thread-safe); null where float16
// does not hold them exactly, or the weight has no half_scales (then kernels read the float32 ones:
// the same values either way).
const LowBitHalfScales* exact_half_scales(const LowBitWeight& w);

// Whether every zero of the weight is zeros[0][0] (checked at the first call, thread-safe); false
// for a weight without half_scales, whose kernels then read a zero per group.
bool low_bit_zeros_shared(const LowBitWeight& w);

// Packs integer codes (out, in) in kernel column order (entries in [0, 2^bits)) with float32
// scales and zeros (out, groups). Errors name `what`.
LowBitWeight pack_low_bit(const at::Tensor& codes, const at::Tensor& scales,
                          const at::Tensor& zeros, int bits, int64_t group_size,
                          const at::Tensor& input_order, const char* what);

// The codes back, (out, in) int32 in kernel column order: the inverse of pack_low_bit's packing.
at::Tensor unpack_low_bit_codes(const LowBitWeight& weight);

// x (..., in_features) as (rows, in_features) in the weight's kernel column order (act-order
// checkpoints gather their columns; otherwise a view).
at::Tensor in_kernel_order(const at::Tensor& x, const LowBitWeight& weight);

// The float32 (out, in) weight in the inputs' own order (the plain reference of the kernels).
at::Tensor dequantize_low_bit(const LowBitWeight& weight);

}  // namespace rqat::ops
