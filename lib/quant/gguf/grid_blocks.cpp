// See grid_blocks.h. Block layouts are blocks.cpp's (its header comment); here every
// block is taken apart into llama.cpp's own codes (q8_0's q + 128, q3_k's low | high << 2, q6_k's
// 6-bit code: each the value's integer plus the type's zero), the float32 steps d * sc and mins
// dmin * m as the gguf package computes them, and the integer sub-block scales, and put back
// together. Compiled without floating-point contraction, like blocks.cpp.
#include "quant/gguf/grid_blocks.h"

#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <optional>

#include "io/error.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/quantize.h"
#include "quant/uniform_quantizer.h"

namespace rqat::quant {

namespace {

using io::GgufType;

// One block taken apart: at most 256 codes and 16 sub-blocks.
struct BlockParts {
  std::array<uint8_t, 256> code{};  // llama.cpp's code, in [0, 2^bits)
  std::array<float, 16> step{};     // d * sc (signed for the zero form)
  std::array<float, 16> min{};      // min form: dmin * m (q4_1: -m)
  std::array<int, 16> sub_scale{};  // the stored integer sub-block scale (K-quants)
  std::array<int, 16> sub_min{};    // and min (q2_k, q4_k, q5_k)
  float d = 0, dmin = 0;            // fp16 block scales as float32
};

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

void put_half(uint8_t* p, float x) {
  const uint16_t bits = c10::Half(x).x;
  std::memcpy(p, &bits, 2);
}

bool is_half(float x) { return static_cast<float>(c10::Half(x)) == x; }

void unpack_block(GgufType type, const uint8_t* b, BlockParts& p) {
  switch (type) {
    case GgufType::kQ8_0:
      p.d = half_at(b);
      for (int i = 0; i < 32; ++i)
        p.code[i] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + i]) + 128);
      p.step[0] = p.d;
      return;
    case GgufType::kQ4_0:
    case GgufType::kQ4_1: {
      const bool with_min = type == GgufType::kQ4_1;
      const uint8_t* qs = b + (with_min ? 4 : 2);
      p.d = half_at(b);
      for (int j = 0; j < 16; ++j) {
        p.code[j] = qs[j] & 0x0F;
        p.code[j + 16] = qs[j] >> 4;
      }
      p.step[0] = p.d;
      if (with_min) p.min[0] = -half_at(b + 2);
      return;
    }
    case GgufType::kQ2_K: {
      p.d = half_at(b + 80);
      p.dmin = half_at(b + 82);
      for (int e = 0; e < 256; ++e)
        p.code[e] = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
      for (int j = 0; j < 16; ++j) {
        p.sub_scale[j] = b[j] & 0x0F;
        p.sub_min[j] = b[j] >> 4;
        p.step[j] = p.d * static_cast<float>(p.sub_scale[j]);
        p.min[j] = p.dmin * static_cast<float>(p.sub_min[j]);
      }
      return;
    }
    case GgufType::kQ3_K: {
      p.d = half_at(b + 108);
      for (int e = 0; e < 256; ++e) {
        const int low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
        const int high = (b[e % 32] >> (e / 32)) & 1;
        p.code[e] = static_cast<uint8_t>(low | (high << 2));
      }
      for (int j = 0; j < 16; ++j) {
        p.sub_scale[j] = unpack_q3_k_scale(b + 96, j);
        p.step[j] = p.d * static_cast<float>(p.sub_scale[j]);
      }
      return;
    }
    case GgufType::kQ4_K:
    case GgufType::kQ5_K: {
      const bool five = type == GgufType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      p.d = half_at(b);
      p.dmin = half_at(b + 2);
      for (int j = 0; j < 8; ++j) {
        unpack_k_scale_min(b + 4, j, p.sub_scale[j], p.sub_min[j]);
        p.step[j] = p.d * static_cast<float>(p.sub_scale[j]);
        p.min[j] = p.dmin * static_cast<float>(p.sub_min[j]);
        for (int l = 0; l < 32; ++l) {
          int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
          if (five) q |= ((qh[l] >> j) & 1) << 4;
          p.code[32 * j + l] = static_cast<uint8_t>(q);
        }
      }
      return;
    }
    case GgufType::kQ6_K: {
      p.d = half_at(b + 208);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, r = e % 128;
        const int low = (b[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int high = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
        p.code[e] = static_cast<uint8_t>(low | (high << 4));
      }
      for (int j = 0; j < 16; ++j) {
        p.sub_scale[j] = static_cast<int8_t>(b[192 + j]);
        p.step[j] = p.d * static_cast<float>(p.sub_scale[j]);
      }
      return;
    }
    default:
      fail("gguf grid: {} has no grid", enum_name(type));
  }
}

void pack_block(GgufType type, const BlockParts& p, uint8_t* b, size_t block_bytes) {
  std::memset(b, 0, block_bytes);
  switch (type) {
    case GgufType::kQ8_0:
      put_half(b, p.d);
      for (int i = 0; i < 32; ++i)
        b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(p.code[i]) - 128));
      return;
    case GgufType::kQ4_0:
    case GgufType::kQ4_1: {
      const bool with_min = type == GgufType::kQ4_1;
      put_half(b, p.d);
      if (with_min) put_half(b + 2, -p.min[0]);
      uint8_t* qs = b + (with_min ? 4 : 2);
      for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(p.code[j] | (p.code[j + 16] << 4));
      return;
    }
    case GgufType::kQ2_K:
      for (int j = 0; j < 16; ++j)
        b[j] = static_cast<uint8_t>(p.sub_scale[j] | (p.sub_min[j] << 4));
      for (int e = 0; e < 256; ++e)
        b[16 + 32 * (e / 128) + e % 32] |= static_cast<uint8_t>(p.code[e] << (2 * ((e / 32) % 4)));
      put_half(b + 80, p.d);
      put_half(b + 82, p.dmin);
      return;
    case GgufType::kQ3_K:
      for (int e = 0; e < 256; ++e) {
        b[e % 32] |= static_cast<uint8_t>((p.code[e] >> 2) << (e / 32));
        b[32 + 32 * (e / 128) + e % 32] |=
            static_cast<uint8_t>((p.code[e] & 3) << (2 * ((e / 32) % 4)));
      }
      for (int j = 0; j < 16; ++j) pack_q3_k_scale(b + 96, j, p.sub_scale[j]);
      put_half(b + 108, p.d);
      return;
    case GgufType::kQ4_K:
    case GgufType::kQ5_K: {
      const bool five = type == GgufType::kQ5_K;
      put_half(b, p.d);
      put_half(b + 2, p.dmin);
      uint8_t* qh = b + 16;
      uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        pack_k_scale_min(b + 4, j, p.sub_scale[j], p.sub_min[j]);
        for (int l = 0; l < 32; ++l) {
          const int q = p.code[32 * j + l];
          qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q & 0x0F) << (4 * (j % 2)));
          if (five) qh[l] |= static_cast<uint8_t>(((q >> 4) & 1) << j);
        }
      }
      return;
    }
    case GgufType::kQ6_K:
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, r = e % 128;
        b[64 * h + r % 64] |= static_cast<uint8_t>((p.code[e] & 0x0F) << (4 * (r / 64)));
        b[128 + 32 * h + r % 32] |= static_cast<uint8_t>((p.code[e] >> 4) << (2 * (r / 32)));
      }
      for (int j = 0; j < 16; ++j)
        b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(p.sub_scale[j]));
      put_half(b + 208, p.d);
      return;
    default:
      fail("gguf grid: {} has no grid", enum_name(type));
  }
}

// Ranges of the stored integer sub-block scale and min.
struct SubScaleRange {
  int lo, hi;
};
SubScaleRange sub_scale_range(GgufType type) {
  switch (type) {
    case GgufType::kQ2_K:
      return {0, 15};
    case GgufType::kQ3_K:
      return {-32, 31};
    case GgufType::kQ4_K:
    case GgufType::kQ5_K:
      return {0, 63};
    case GgufType::kQ6_K:
      return {-128, 127};
    default:
      return {0, 0};
  }
}

// The integer k in [range] with base * k == value in float32 (0 when base is 0 and value is 0,
// the stored field of an all-zero block), or nullopt.
std::optional<int> integer_multiple(float value, float base, SubScaleRange range, int when_zero) {
  if (base == 0) return value == 0 ? std::optional<int>(when_zero) : std::nullopt;
  const float k = std::nearbyint(value / base);
  if (!(k >= static_cast<float>(range.lo) && k <= static_cast<float>(range.hi)))
    return std::nullopt;
  if (base * k != value) return std::nullopt;
  return static_cast<int>(k);
}

}  // namespace

QuantizedWeight gguf_grid_from_blocks(io::GgufType type, const std::string& bytes, int64_t rows,
                                      int64_t cols) {
  const GgufGridInfo grid = gguf_grid_info(type, "gguf grid");
  const auto info = io::gguf_type_info(type);
  const int64_t expected = io::gguf_tensor_bytes(type, cols, rows, "gguf grid");
  if (static_cast<int64_t>(bytes.size()) != expected)
    fail("gguf grid: {} bytes for a {} x {} {} tensor that takes {}", bytes.size(), rows, cols,
         enum_name(type), expected);
  const int64_t blocks = cols / grid.block, subs = grid.block / grid.sub_block;
  const int64_t groups = cols / grid.sub_block;
  const float max_code = static_cast<float>((1 << grid.bits) - 1);
  QuantizedWeight w;
  w.gguf_grid = type;
  w.bits = grid.bits;
  w.group_size = grid.sub_block;
  w.codes = at::empty({rows, cols}, at::kByte);
  w.scales = at::empty({rows, groups}, at::kFloat);
  w.zeros = at::empty({rows, groups}, at::kFloat);
  w.g_idx = contiguous_group_index(cols, grid.sub_block);
  if (grid.super_scales) w.super_scales = at::empty({rows, blocks, 2}, at::kFloat);
  uint8_t* codes = w.codes.data_ptr<uint8_t>();
  float* scales = w.scales.data_ptr<float>();
  float* zeros = w.zeros.data_ptr<float>();
  float* super = grid.super_scales ? w.super_scales.data_ptr<float>() : nullptr;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  BlockParts p;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < blocks; ++k) {
      unpack_block(type, data + (r * blocks + k) * info.block_bytes, p);
      if (super != nullptr) {
        super[(r * blocks + k) * 2] = p.d;
        super[(r * blocks + k) * 2 + 1] = p.dmin;
      }
      for (int64_t j = 0; j < subs; ++j) {
        const int64_t g = r * groups + k * subs + j;
        const float step = p.step[j];
        // The zero form stores a negative step as its magnitude over mirrored codes.
        const bool mirror = !grid.min_form && step < 0;
        if (grid.min_form && step < 0)
          fail("gguf grid: {} block {} of row {} has a negative step (not llama.cpp's quantizer)",
               enum_name(type), k, r);
        scales[g] = mirror ? -step : step;  // -0 stays -0: the block's fp16 bits come back
        zeros[g] = grid.min_form ? p.min[j]
                                 : (mirror ? max_code - static_cast<float>(grid.zero)
                                           : static_cast<float>(grid.zero));
        for (int64_t l = 0; l < grid.sub_block; ++l) {
          const uint8_t c = p.code[j * grid.sub_block + l];
          codes[r * cols + k * grid.block + j * grid.sub_block + l] =
              mirror ? static_cast<uint8_t>(static_cast<int>(max_code) - c) : c;
        }
      }
    }
  }
  return w;
}

QuantizedWeight gguf_grid_quantize(io::GgufType type, const at::Tensor& w,
                                   const at::Tensor& importance) {
  if (!w.defined() || w.dim() != 2 || !c10::isFloatingType(w.scalar_type()))
    fail("gguf grid: the weight must be a 2-D float tensor (out, in)");
  const GgufGridInfo grid = gguf_grid_info(type, "gguf grid");
  if (w.size(1) % grid.block != 0)
    fail("gguf grid: rows of {} values are not a whole number of {}-value {} blocks", w.size(1),
         grid.block, enum_name(type));
  QuantizedWeight q =
      gguf_grid_from_blocks(type, quantize_gguf_tensor(type, w, importance), w.size(0), w.size(1));
  const auto device = w.device();
  for (at::Tensor* t : {&q.codes, &q.scales, &q.zeros, &q.g_idx, &q.super_scales})
    if (t->defined()) *t = t->to(device);
  return q;
}

std::string gguf_grid_to_blocks(io::GgufType type, const QuantizedWeight& w,
                                const std::string& name) {
  const GgufGridInfo grid = gguf_grid_info(type, name);
  if (w.gguf_grid != type) fail("{}: the layer is not on the {} grid", name, gguf_grid_name(type));
  w.validate(name);
  const auto info = io::gguf_type_info(type);
  const int64_t rows = w.out_features(), cols = w.in_features();
  const int64_t blocks = cols / grid.block, subs = grid.block / grid.sub_block;
  const int64_t groups = cols / grid.sub_block;
  const int max_code = (1 << grid.bits) - 1;
  const auto codes_t = w.codes.cpu().contiguous();
  const auto scales_t = w.scales.cpu().contiguous();
  const auto zeros_t = w.zeros.cpu().contiguous();
  const at::Tensor super_t = grid.super_scales ? w.super_scales.cpu().contiguous() : at::Tensor();
  const uint8_t* codes = codes_t.data_ptr<uint8_t>();
  const float* scales = scales_t.data_ptr<float>();
  const float* zeros = zeros_t.data_ptr<float>();
  const float* super = grid.super_scales ? super_t.data_ptr<float>() : nullptr;
  const SubScaleRange range = sub_scale_range(type);
  std::string out(static_cast<size_t>(rows * blocks * info.block_bytes), '\0');
  auto* data = reinterpret_cast<uint8_t*>(out.data());
  BlockParts p;
  const auto refuse = [&](int64_t r, int64_t g, std::string_view what, float value) {
    fail(
        "{}: row {} sub-block {}: {} {} is not storable in {} (a grid the layer did not start "
        "on)",
        name, r, g % groups, what, value, enum_name(type));
  };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < blocks; ++k) {
      if (super != nullptr) {
        p.d = super[(r * blocks + k) * 2];
        p.dmin = super[(r * blocks + k) * 2 + 1];
        if (!is_half(p.d) || !is_half(p.dmin)) refuse(r, k * subs, "super-block scale", p.d);
      }
      for (int64_t j = 0; j < subs; ++j) {
        const int64_t g = r * groups + k * subs + j;
        const bool mirror = !grid.min_form && zeros[g] != static_cast<float>(grid.zero);
        const float step = mirror ? -scales[g] : scales[g];
        for (int64_t l = 0; l < grid.sub_block; ++l) {
          const int c = codes[r * cols + k * grid.block + j * grid.sub_block + l];
          p.code[j * grid.sub_block + l] = static_cast<uint8_t>(mirror ? max_code - c : c);
        }
        if (!grid.super_scales) {
          // q8_0, q4_0, q4_1: the step is the block's fp16 d (and -min its fp16 m).
          if (!is_half(step)) refuse(r, g, "scale", step);
          if (grid.min_form && !is_half(zeros[g])) refuse(r, g, "min", zeros[g]);
          p.d = step;
          p.min[0] = zeros[g];
          continue;
        }
        // The raw field of an all-zero sub-block is 0 (q3_k's minus 32), as llama.cpp writes it.
        const auto sc = integer_multiple(step, p.d, range, type == GgufType::kQ3_K ? -32 : 0);
        if (!sc) refuse(r, g, "scale", step);
        p.sub_scale[j] = *sc;
        if (grid.min_form) {
          const auto m = integer_multiple(zeros[g], p.dmin, range, 0);
          if (!m) refuse(r, g, "min", zeros[g]);
          p.sub_min[j] = *m;
        }
      }
      pack_block(type, p, data + (r * blocks + k) * info.block_bytes,
                 static_cast<size_t>(info.block_bytes));
    }
  }
  return out;
}

QuantizedWeight select_rows(const QuantizedWeight& w, const at::Tensor& index) {
  QuantizedWeight out = w;
  for (at::Tensor* t : {&out.codes, &out.scales, &out.zeros, &out.super_scales})
    if (t->defined()) *t = t->index_select(0, index.to(t->device(), at::kLong)).contiguous();
  return out;
}

}  // namespace rqat::quant
