// rqat's integer weight formats in one table, as ggml keeps one table of its types: the bit widths
// a quantized weight may have, each with its largest code. Every check of a width (the packers,
// the packed kernels, GPTQ checkpoints and configs, QuantSpec, the fake quantizer) consults this
// table, and its error lists the widths from it; a new width is one row here plus its kernels.
// (The grids with other value sets keep their own tables: GGUF's block types in
// quant/gguf/grid.h, NF4 in quant/nf4.h.)
#pragma once

#include <string>

namespace rqat::ops {

struct IntegerWeightFormat {
  int bits;
  int max_code;  // 2^bits - 1: codes are 0 .. max_code, the zero point one of them
};

inline constexpr IntegerWeightFormat kIntegerWeightFormats[] = {
    {2, 3},
    {3, 7},
    {4, 15},
    {8, 255},
};

// The row of `bits`, or nullptr when no format has that width.
constexpr const IntegerWeightFormat* integer_weight_format(int bits) {
  for (const auto& format : kIntegerWeightFormats)
    if (format.bits == bits) return &format;
  return nullptr;
}

constexpr bool integer_bits_supported(int bits) { return integer_weight_format(bits) != nullptr; }

// "2, 3, 4 or 8", for error messages.
inline std::string integer_bits_choices() {
  std::string out;
  constexpr size_t n = sizeof(kIntegerWeightFormats) / sizeof(kIntegerWeightFormats[0]);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += std::to_string(kIntegerWeightFormats[i].bits);
  }
  return out;
}

}  // namespace rqat::ops
