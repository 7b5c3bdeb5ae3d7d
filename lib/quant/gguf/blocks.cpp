// See blocks.h. Block layouts (bytes in order; "fp16" is IEEE half, little-endian):
//   q8_0  fp16 d | 32 x int8 q                                w = q * d
//   q4_0  fp16 d | 16 bytes: byte j = q[j] | q[j + 16] << 4   w = d * (q - 8)
//   q4_1  fp16 d | fp16 m | 16 bytes as q4_0                  w = d * q + m
//   q2_k  16 bytes: sub-block j's scale (low nibble) and min (high nibble) | 64 bytes of 2-bit
//         codes | fp16 d | fp16 dmin. Code e (0..255) is bits 2s..2s+1 of byte 32h + l, with
//         e = 128h + 32s + l; sub-blocks of 16.        w = (d * sc) * q - (dmin * m)
//   q3_k  32 bytes hmask | 64 bytes of 2-bit codes (as q2_k) | 12 bytes of 6-bit scales | fp16 d.
//         The high bit of code e = 32b + l is bit b of hmask[l]; q = low - 4 (1 - high), in
//         [-4, 3]. Scale j's low nibble: byte j (j < 8) low / byte j - 8 high nibble; its top 2
//         bits: bits 2 (j / 4) of byte 8 + j % 4; minus 32.  w = (d * sc) * q
//   q4_k  fp16 d | fp16 dmin | 12 bytes of 6-bit scales and mins | 128 bytes of nibbles. Code
//         e = 32j + l (sub-block j of 32) is nibble j % 2 of byte 32 (j / 2) + l. Scale/min j < 4:
//         the low 6 bits of bytes j / j + 4; j >= 4: low / high nibble of byte j + 4, top 2 bits
//         from bits 6-7 of byte j - 4 / j.               w = (d * sc) * q - (dmin * m)
//   q5_k  q4_k's fields, then 32 bytes qh before the nibbles: bit j of qh[l] is code 32j + l's
//         fifth bit.                                     w = (d * sc) * q - (dmin * m)
//   q6_k  128 bytes low nibbles | 64 bytes high 2 bits | 16 x int8 scales | fp16 d. Code
//         e = 128h + 64s + l (l < 64): nibble s of byte 64h + l; high bits: bits 2t..2t+1 of byte
//         32h + l' for e = 128h + 32t + l'; q = low | high << 4, minus 32; sub-blocks of 16.
//                                                         w = (d * sc) * q
// Each formula is evaluated as written, left to right, in float32, as the gguf package does.
#include "quant/gguf/blocks.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#include "io/error.h"
#include "quant/gguf/quantize.h"

namespace rqat::quant {

namespace {

using io::GgufType;

float half_to_float(const char* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

void dequantize_block(GgufType type, const uint8_t* b, float* y) {
  const char* c = reinterpret_cast<const char*>(b);
  switch (type) {
    case GgufType::kQ8_0: {
      const float d = half_to_float(c);
      for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
      break;
    }
    case GgufType::kQ4_0: {
      const float d = half_to_float(c);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>((b[2 + j] & 0x0F) - 8);
        y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
      }
      break;
    }
    case GgufType::kQ4_1: {
      const float d = half_to_float(c), m = half_to_float(c + 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(b[4 + j] & 0x0F) + m;
        y[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
      }
      break;
    }
    case GgufType::kQ2_K: {
      const uint8_t* scales = b;
      const uint8_t* qs = b + 16;
      const float d = half_to_float(c + 80), dmin = half_to_float(c + 82);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32, j = e / 16;
        const float q = static_cast<float>((qs[32 * h + l] >> (2 * s)) & 3);
        const float dl = d * static_cast<float>(scales[j] & 0x0F);
        const float ml = dmin * static_cast<float>(scales[j] >> 4);
        y[e] = dl * q - ml;
      }
      break;
    }
    case GgufType::kQ3_K: {
      const uint8_t* hmask = b;
      const uint8_t* qs = b + 32;
      const uint8_t* sc = b + 96;
      const float d = half_to_float(c + 108);
      for (int e = 0; e < 256; ++e) {
        const int j = e / 16;
        const float dl = d * static_cast<float>(unpack_q3_k_scale(sc, j));
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int low = (qs[32 * h + l] >> (2 * s)) & 3;
        const int high = (hmask[e % 32] >> (e / 32)) & 1;
        y[e] = dl * static_cast<float>(low - 4 * (1 - high));
      }
      break;
    }
    case GgufType::kQ4_K:
    case GgufType::kQ5_K: {
      const float d = half_to_float(c), dmin = half_to_float(c + 2);
      const uint8_t* scales = b + 4;
      const bool five = type == GgufType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        unpack_k_scale_min(scales, j, sc, m);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
          if (five) q |= ((qh[l] >> j) & 1) << 4;
          y[32 * j + l] = dl * static_cast<float>(q) - ml;
        }
      }
      break;
    }
    case GgufType::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
      const float d = half_to_float(c + 208);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, r = e % 128;
        const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        const float dl = d * static_cast<float>(scales[e / 16]);
        y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
      }
      break;
    }
    case GgufType::kF32:
    case GgufType::kF16:
    case GgufType::kBF16:
    case GgufType::kCount:
      fail("dequantize_gguf: {} is not a block type", enum_name(type));
  }
}

std::string floats_as(GgufType type, const float* x, int64_t n) {
  std::string out;
  if (type == GgufType::kF32) {
    out.assign(reinterpret_cast<const char*>(x), static_cast<size_t>(n) * 4);
    return out;
  }
  out.resize(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = type == GgufType::kF16 ? c10::Half(x[i]).x : c10::BFloat16(x[i]).x;
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

}  // namespace

bool gguf_row_fits(io::GgufType type, int64_t cols) {
  return cols > 0 && cols % io::gguf_type_info(type).block_elements == 0;
}

std::string quantize_gguf(io::GgufType type, const float* x, int64_t rows, int64_t cols,
                          const float* importance) {
  const auto info = io::gguf_type_info(type);
  const int64_t bytes =
      io::gguf_tensor_bytes(type, cols, rows, fmt::format("quantize_gguf {}", enum_name(type)));
  if (type == GgufType::kF32 || type == GgufType::kF16 || type == GgufType::kBF16)
    return floats_as(type, x, rows * cols);
  std::string out(static_cast<size_t>(bytes), '\0');
  auto* y = reinterpret_cast<uint8_t*>(out.data());
  const int64_t row_bytes = cols / info.block_elements * info.block_bytes;
  for (int64_t r = 0; r < rows; ++r)
    quantize_gguf_row(type, x + r * cols, cols, importance, y + r * row_bytes);
  return out;
}

void dequantize_gguf(io::GgufType type, const char* data, int64_t rows, int64_t cols, float* out) {
  const auto info = io::gguf_type_info(type);
  io::gguf_tensor_bytes(type, cols, rows, fmt::format("dequantize_gguf {}", enum_name(type)));
  const int64_t n = rows * cols;
  if (type == GgufType::kF32) {
    std::memcpy(out, data, static_cast<size_t>(n) * 4);
    return;
  }
  if (type == GgufType::kF16 || type == GgufType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, data + 2 * i, 2);
      out[i] = type == GgufType::kF16
                   ? static_cast<float>(c10::Half(bits, c10::Half::from_bits()))
                   : static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
    }
    return;
  }
  const auto* b = reinterpret_cast<const uint8_t*>(data);
  for (int64_t k = 0; k < n / info.block_elements; ++k)
    dequantize_block(type, b + k * info.block_bytes, out + k * info.block_elements);
}

std::string quantize_gguf_tensor(io::GgufType type, const at::Tensor& w,
                                 const at::Tensor& importance) {
  if (!w.defined() || w.dim() < 1) fail("quantize_gguf: a tensor of at least one dimension");
  const auto x = w.detach().to(at::kCPU, at::kFloat).contiguous();
  const int64_t cols = x.size(-1), rows = cols > 0 ? x.numel() / cols : 0;
  if (!importance.defined()) return quantize_gguf(type, x.data_ptr<float>(), rows, cols);
  const auto qw = importance.detach().to(at::kCPU, at::kFloat).contiguous();
  if (qw.dim() != 1 || qw.size(0) != cols)
    fail("quantize_gguf: an importance of {} values for rows of {}", qw.numel(), cols);
  if (!at::isfinite(qw).all().item<bool>() || (qw < 0).any().item<bool>())
    fail("quantize_gguf: the importance holds negative or non-finite values");
  return quantize_gguf(type, x.data_ptr<float>(), rows, cols, qw.data_ptr<float>());
}

at::Tensor dequantize_gguf_tensor(io::GgufType type, const std::string& data,
                                  at::IntArrayRef shape) {
  if (shape.empty()) fail("dequantize_gguf: a shape of at least one dimension");
  at::Tensor out = at::empty(shape, at::kFloat);
  const int64_t cols = shape.back(), rows = cols > 0 ? out.numel() / cols : 0;
  const int64_t bytes = io::gguf_tensor_bytes(type, cols, rows, "dequantize_gguf");
  if (static_cast<int64_t>(data.size()) != bytes)
    fail("dequantize_gguf: {} bytes for a {} tensor that takes {}", data.size(), enum_name(type),
         bytes);
  dequantize_gguf(type, data.data(), rows, cols, out.data_ptr<float>());
  return out;
}

}  // namespace rqat::quant
