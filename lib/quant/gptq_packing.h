// The packed tensor layout of GPTQ checkpoints (AutoGPTQ / GPTQModel / vLLM / transformers), for
// 2, 3, 4 and 8 bits. Integer values are packed into int32 words as one little-endian bit stream
// along the packed dimension: value k occupies bits [k * bits, (k + 1) * bits) of the stream and
// word w holds stream bits [32 w, 32 w + 32). For 2/4/8 bits that is 32/bits whole values per word;
// for 3 bits a block of 32 values fills exactly 3 words and values 10 and 21 of each block straddle
// two words (the "10, 1, 10, 1, 10" interleave of the reference packers).
//
// Per quantized linear layer NAME (out x in) a checkpoint stores
//   NAME.qweight int32   (in * bits / 32, out)     codes packed along the input dimension (dim 0)
//   NAME.qzeros  int32   (groups, out * bits / 32) zero points packed along the output dimension
//   NAME.scales  float16 (groups, out)
//   NAME.g_idx   int32   (in)                      group of every input column
// and W[o, i] = (code[i, o] - zero[g_idx[i], o]) * scale[g_idx[i], o]. Format "gptq" (v1) stores
// each zero point minus one (modulo 2^bits per field); "gptq_v2" stores it as is.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "io/enum_names.h"
#include "quant/quantized_weight.h"

namespace rqat::quant {

// The packed dimension must be a multiple of this: 32 / bits for 2, 4 and 8 bits; 32 for 3 bits
// (a word boundary falls on a value boundary only every 32 values).
int64_t gptq_pack_multiple(int bits);

// values: (n, m) integer tensor with entries in [0, 2^bits), n a multiple of gptq_pack_multiple.
// Returns int32 (n * bits / 32, m), packing each column. Errors name `what` (a tensor name).
at::Tensor pack_gptq_rows(const at::Tensor& values, int bits, std::string_view what);
// Inverse: int32 (r, m) -> int32 (r * 32 / bits, m), entries in [0, 2^bits).
at::Tensor unpack_gptq_rows(const at::Tensor& packed, int bits, std::string_view what);
// The same along dim 1: (n, m) -> (n, m * bits / 32) and back.
at::Tensor pack_gptq_columns(const at::Tensor& values, int bits, std::string_view what);
at::Tensor unpack_gptq_columns(const at::Tensor& packed, int bits, std::string_view what);

enum class GptqFormat {
  kV1,     // "gptq": zero points stored minus one; what vLLM, transformers and AutoGPTQ read
  kV2,     // "gptq_v2": zero points stored as they are (GPTQModel)
  kCount,  // not a format
};
constexpr EnumNames<GptqFormat> enum_names(GptqFormat) { return {"gptq", "gptq_v2"}; }

// The tensors of one quantized linear layer as a GPTQ checkpoint stores them (see above).
struct GptqPackedLayer {
  at::Tensor qweight;  // int32 (in * bits / 32, out)
  at::Tensor qzeros;   // int32 (groups, out * bits / 32)
  at::Tensor scales;   // float16 (groups, out)
  at::Tensor g_idx;    // int32 (in)
};

struct GptqPackOptions {
  GptqFormat format = GptqFormat::kV1;
  // A v1 zero point of 0 cannot be stored (0 - 1 wraps to 2^bits - 1 and every reader gets a
  // different value back), so packing refuses it unless this is set; then the field wraps as the
  // reference packers do and per-field readers (vLLM, rqat) read a zero point of 2^bits.
  bool allow_v1_zero_wrap = false;
  // Scales are stored as float16. Packing refuses scales that float16 does not represent exactly
  // (the exported weights would differ from the ones rqat computed) unless this is set.
  bool round_scales_to_fp16 = false;
};

// Packs one layer's quantized state. `name` is the module name used in error messages. Refuses,
// with an error naming the layer: bits other than 2/3/4/8, in or out features that are not
// multiples of gptq_pack_multiple(bits), a group size that does not divide in_features (uneven
// groups are allowed inside rqat but not by the GPTQ loaders), codes or zero points out of range,
// scales that are not positive, overflow float16 or (see options) are not float16 values.
GptqPackedLayer pack_gptq_layer(const QuantizedWeight& weight, const std::string& name,
                                const GptqPackOptions& options = {});

// Unpacks a stored layer of the given shape into codes (out, in) uint8, scales and zeros
// (out, groups) float32 and g_idx (in) int32. v1 zero points are read per field as stored + 1, as
// vLLM's and transformers' kernels do (so a wrapped field reads 2^bits, outside the range that
// QuantizedWeight::validate accepts; dequantize() computes with it all the same). An undefined
// g_idx means the sequential c / group_size. Every shape, dtype and range is checked, errors name
// `name`.
QuantizedWeight unpack_gptq_layer(const GptqPackedLayer& packed, int bits, int64_t group_size,
                                  GptqFormat format, int64_t in_features, int64_t out_features,
                                  const std::string& name);

}  // namespace rqat::quant
