// See low_bit_matmul_narrow_kernel.h. Compiled for the library's own target, so its vectors are
// the baseline's: four lanes, one SSE2 or NEON register. Every shift below is the same for all
// lanes (SSE2 has that one).
#include "ops/low_bit_matmul_narrow_kernel.h"

#include <algorithm>
#include <cstring>

#include "io/error.h"
#include "ops/low_bit_decode_order.h"
#include "ops/vector_lanes.h"

namespace rqat::ops {
namespace {

using Floats4 = float __attribute__((vector_size(16)));
using Words4 = uint32_t __attribute__((vector_size(16)));
using Ints4 = int32_t __attribute__((vector_size(16)));

// Signed conversion (one instruction on SSE2): every masked value below is under 2^24.
RQAT_LANES_INLINE Floats4 to_floats(Words4 w) {
  return __builtin_convertvector(reinterpret_cast<Ints4>(w), Floats4);
}

RQAT_LANES_INLINE Words4 splat_word(uint32_t w) { return Words4{} + w; }

// One block's words, ready for its quads (ops/low_bit_decode_order.h) to be masked out.
template <int Bits>
struct BlockWords;

template <>
struct BlockWords<4> {
  Words4 words, words_down8;  // the four words; the same shifted down by 8 bits
  RQAT_LANES_INLINE explicit BlockWords(const uint32_t* w) {
    std::memcpy(&words, w, sizeof words);
    words_down8 = words >> 8;
  }
  // Quad q's codes times 2^nibble_shift(q).
  RQAT_LANES_INLINE Floats4 quad(int q) const {
    return to_floats((q >= 6 ? words_down8 : words) & (0xFu << nibble_shift(q)));
  }
  // Codes 4q .. 4q + 3 in order, as floats: code 16h + 4k + j (h = q / 4, k = q % 4) is nibble
  // 2k + j / 2 of word 2h + j % 2, so the lanes take words 2h, 2h + 1, 2h, 2h + 1 (nibble 7's
  // after the shift by 8, as in quad()) and each its own mask, then a power of two undoes the
  // position: exact.
  RQAT_LANES_INLINE Floats4 codes_in_order(int q) const {
    const uint32_t h = q / 4, k = q % 4, b = 8 * std::min(k, 2u);
    const Words4 pick = {2 * h, 2 * h + 1, 2 * h, 2 * h + 1};
    const Words4 lanes = __builtin_shuffle(k == 3 ? words_down8 : words, pick);
    const Words4 masks = {0xFu << b, 0xFu << b, 0xFu << (b + 4), 0xFu << (b + 4)};
    const float low = 1.0f / float(1u << b), high = low / 16;
    return to_floats(lanes & masks) * Floats4{low, low, high, high};
  }
};

// Quad q of 2 or 3 bits holds codes 4q .. 4q + 3 in order, lane l's times 2^(s + 2l).
RQAT_LANES_INLINE Floats4 undo_low_bits_shift(Floats4 quad, int q) {
  const float first = 1.0f / float(1u << low_bits_shift(4 * q));
  return quad * Floats4{first, first / 4, first / 16, first / 64};
}

// The low two bits of codes 4q .. 4q + 3, each at low_bits_shift, from words[q / 4] splat.
RQAT_LANES_INLINE Words4 low_bits(const Words4 (&low)[2][2], int q) {
  const int s = low_bits_shift(4 * q);  // lane 0's; lane l's is s + 2l
  const Words4 masks = {3u << s, 3u << (s + 2), 3u << (s + 4), 3u << (s + 6)};
  return low[q / 4][q % 4 == 3 ? 1 : 0] & masks;
}

template <>
struct BlockWords<2> {
  Words4 low[2][2];  // word j splat, and shifted down by 8
  RQAT_LANES_INLINE explicit BlockWords(const uint32_t* w) {
    for (int j = 0; j < 2; ++j) low[j][0] = splat_word(w[j]), low[j][1] = splat_word(w[j] >> 8);
  }
  RQAT_LANES_INLINE Floats4 quad(int q) const { return to_floats(low_bits(low, q)); }
  RQAT_LANES_INLINE Floats4 codes_in_order(int q) const { return undo_low_bits_shift(quad(q), q); }
};

template <>
struct BlockWords<3> {
  Words4 low[2][2];
  Words4 high[2];  // word 2 (third bits) splat, and shifted down by 16
  RQAT_LANES_INLINE explicit BlockWords(const uint32_t* w) {
    for (int j = 0; j < 2; ++j) low[j][0] = splat_word(w[j]), low[j][1] = splat_word(w[j] >> 8);
    high[0] = splat_word(w[2]), high[1] = splat_word(w[2] >> 16);
  }
  // Code 4q + l's third bit lands at bit t = 4q + l (- 16 for quads 4-7); times 2^(s + 2 - t) it
  // is worth 4 code units at the low bits' position s. All exact: powers of two times 0 or 1.
  RQAT_LANES_INLINE Floats4 quad(int q) const {
    const int t = 4 * q - (q >= 4 ? 16 : 0), s = low_bits_shift(4 * q);
    const Words4 masks = {1u << t, 1u << (t + 1), 1u << (t + 2), 1u << (t + 3)};
    const Floats4 lift = {float(1u << (s + 2 - t)), float(1u << (s + 3 - t)),
                          float(1u << (s + 4 - t)), float(1u << (s + 5 - t))};
    return to_floats(low_bits(low, q)) + to_floats(high[q / 4] & masks) * lift;
  }
  RQAT_LANES_INLINE Floats4 codes_in_order(int q) const { return undo_low_bits_shift(quad(q), q); }
};

RQAT_LANES_INLINE float lane_sum4(Floats4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

// Independent chains of multiply-adds per row of x: few rows need several to hide the latency;
// many rows give that independence themselves (and fill the 16 registers).
template <int Rows>
constexpr int kChains = Rows <= 2   ? 4
                        : Rows <= 4 ? 2
                                    : 1;

// What a group's sums become. Float activations: scale * (sum - zero * sum x), per group. Int8
// ones (ops/low_bit_matmul_int8_kernel.h's formula, x in decode order holding q): each block's
// lanes, exact integer sums, times scale * d_b, and scale * zero * sum_b d_b sum q subtracted per
// group.
enum class Activations { kFloat, kInt8 };

// Output rows [begin, end) for rows [b0, b0 + Rows) of x.
template <int Bits, int Rows, Activations A>
RQAT_LANES_INLINE void rows_tile(const LowBitKernelArgs& a, int64_t begin, int64_t end,
                                 int64_t b0) {
  constexpr int kC = kChains<Rows>;
  const int64_t group_width = a.blocks_per_group * 32, blocks = a.x_stride / 32;
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    float total[Rows] = {};
    Floats4 scaled[Rows] = {};  // int8: the blocks' lanes times scale * d_b
    for (int64_t g = 0; g < a.groups; ++g) {
      const float scale = a.scales[o * a.groups + g], zero = a.zeros[o * a.groups + g];
      Floats4 acc[Rows][kC] = {};
      const uint32_t* block = row_codes + g * a.blocks_per_group * Bits;
      prefetch_codes_ahead(block);
      const float* xg = a.x_decode_order + b0 * a.x_stride + g * group_width;
      for (int64_t k = 0; k < a.blocks_per_group; ++k) {
        const BlockWords<Bits> words(block + Bits * k);
        // Unrolled, so that each quad's masks and accumulator are fixed (GCC leaves some tiles
        // rolled otherwise).
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
          const Floats4 codes = words.quad(q);
          const float* xq = xg + 32 * k + 4 * q;
#pragma GCC unroll 8
          for (int r = 0; r < Rows; ++r)
            acc[r][q % kC] += codes * load_lanes<Floats4>(xq + r * a.x_stride);
        }
        if constexpr (A == Activations::kInt8) {
          const int64_t b = g * a.blocks_per_group + k;
          for (int r = 0; r < Rows; ++r) {
            Floats4 lanes = acc[r][0];
            for (int c = 1; c < kC; ++c) lanes += acc[r][c];
            scaled[r] += lanes * (scale * a.block_scales[(b0 + r) * blocks + b]);
            for (int c = 0; c < kC; ++c) acc[r][c] = Floats4{};
          }
        }
      }
      for (int r = 0; r < Rows; ++r) {
        const float xsum = a.xsum[(b0 + r) * a.groups + g];
        if constexpr (A == Activations::kInt8) {
          total[r] += scale * zero * xsum;  // subtracted at the end
        } else {
          Floats4 lanes = acc[r][0];
          for (int c = 1; c < kC; ++c) lanes += acc[r][c];
          // scale * (sum - zero * xsum): for a one-hot x the sum and zero * xsum are exact, so
          // the one rounding is that of (code - zero) * scale, the reference's weight.
          total[r] += scale * (lane_sum4(lanes) - zero * xsum);
        }
      }
    }
    for (int r = 0; r < Rows; ++r)
      a.y[(b0 + r) * a.out + o] =
          A == Activations::kInt8 ? lane_sum4(scaled[r]) - total[r] : total[r];
  }
}

template <int Bits, Activations A>
void rows_task(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  int64_t b0 = 0;
  for (; b0 + 8 <= a.batch; b0 += 8) rows_tile<Bits, 8, A>(a, begin, end, b0);
  switch (a.batch - b0) {  // the last rows, with a tile of their own size
    case 7:
      return rows_tile<Bits, 7, A>(a, begin, end, b0);
    case 6:
      return rows_tile<Bits, 6, A>(a, begin, end, b0);
    case 5:
      return rows_tile<Bits, 5, A>(a, begin, end, b0);
    case 4:
      return rows_tile<Bits, 4, A>(a, begin, end, b0);
    case 3:
      return rows_tile<Bits, 3, A>(a, begin, end, b0);
    case 2:
      return rows_tile<Bits, 2, A>(a, begin, end, b0);
    case 1:
      return rows_tile<Bits, 1, A>(a, begin, end, b0);
    default:
      return;
  }
}

template <Activations A>
void rows_of_width(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  if (a.x_decode_order == nullptr)
    fail("low_bit_matmul_narrow_rows: needs x in decode order (args.x_decode_order)");
  switch (a.bits) {
    case 2:
      return rows_task<2, A>(a, begin, end);
    case 3:
      return rows_task<3, A>(a, begin, end);
    case 4:
      return rows_task<4, A>(a, begin, end);
    default:
      fail("low_bit_matmul_narrow_rows: 2, 3 or 4 bits only, got {}", a.bits);
  }
}

// Weight rows [begin, end) dequantized into `out` (x_stride floats a row, natural column order):
// (code - zero) * scale from exact float codes, the reference's two float32 operations.
template <int Bits>
void dequantize_task(const LowBitKernelArgs& a, int64_t begin, int64_t end, float* out) {
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    float* row_out = out + (o - begin) * a.x_stride;
    for (int64_t g = 0; g < a.groups; ++g) {
      const Floats4 scale = splat_lanes<Floats4>(a.scales[o * a.groups + g]);
      const Floats4 zero = splat_lanes<Floats4>(a.zeros[o * a.groups + g]);
      const uint32_t* block = row_codes + g * a.blocks_per_group * Bits;
      float* group_out = row_out + g * a.blocks_per_group * 32;
      for (int64_t k = 0; k < a.blocks_per_group; ++k) {
        const BlockWords<Bits> words(block + Bits * k);
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q)
          store_lanes(group_out + 32 * k + 4 * q, (words.codes_in_order(q) - zero) * scale);
      }
    }
  }
}

}  // namespace

void low_bit_dequantize_narrow_rows(const LowBitKernelArgs& a, int64_t begin, int64_t end,
                                    float* out) {
  switch (a.bits) {
    case 2:
      return dequantize_task<2>(a, begin, end, out);
    case 3:
      return dequantize_task<3>(a, begin, end, out);
    case 4:
      return dequantize_task<4>(a, begin, end, out);
    default:
      fail("low_bit_dequantize_narrow_rows: 2, 3 or 4 bits only, got {}", a.bits);
  }
}

void low_bit_matmul_narrow_rows(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  rows_of_width<Activations::kFloat>(a, begin, end);
}

void low_bit_matmul_narrow_int8_rows(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  if (a.block_scales == nullptr)
    fail("low_bit_matmul_narrow_int8_rows: needs the blocks' scales (args.block_scales)");
  rows_of_width<Activations::kInt8>(a, begin, end);
}

}  // namespace rqat::ops
