// See low_bit_matmul_avx2_kernel.h. The packed layout is ops/low_bit_weight.h's: a block of 32
// codes takes `bits` words; code c of a block sits at
//   2 bits: word c / 16, bits 2 (c % 16);
//   3 bits: its low two bits as 2-bit codes in words 0-1, its high bit at bit c of word 2;
//   4 bits: word 2 (c / 16) + c % 2, bits 4 ((c % 16) / 2);
//   8 bits: byte c.
// "Eighth" e of a block is its codes 8e .. 8e + 7, one 8-lane vector.
#include "ops/low_bit_matmul_avx2_kernel.h"

#include <algorithm>
#include <cstring>

#include "io/error.h"
#include "ops/low_bit_decode_order.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RQAT_AVX2_KERNEL 1
#define RQAT_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define RQAT_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma,f16c")))
#endif

namespace rqat::ops {

#ifdef RQAT_AVX2_KERNEL
namespace {

// The codes of eighth e of the block at w, one per int32 lane (2-4 bits: masked to `Bits` bits).
template <int Bits>
RQAT_AVX2_INLINE __m256i eighth_codes(const uint32_t* w, int e) {
  if constexpr (Bits == 2) {
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i word = _mm256_set1_epi32(static_cast<int>(w[e / 2]));
    return _mm256_and_si256(
        _mm256_srlv_epi32(word, _mm256_add_epi32(shifts, _mm256_set1_epi32(16 * (e % 2)))),
        _mm256_set1_epi32(3));
  } else if constexpr (Bits == 3) {
    const __m256i low = eighth_codes<2>(w, e);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w[2])),
                                           _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * e))),
                         _mm256_set1_epi32(1));
    return _mm256_or_si256(low, _mm256_slli_epi32(high, 2));
  } else if constexpr (Bits == 4) {
    // Words 2h and 2h + 1 (h = e / 2) alternate across the lanes: lane j reads word 2h + j % 2.
    int64_t pair;
    std::memcpy(&pair, w + 2 * (e / 2), sizeof pair);
    const __m256i shifts = _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12);
    return _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi64x(pair),
                          _mm256_add_epi32(shifts, _mm256_set1_epi32(16 * (e % 2)))),
        _mm256_set1_epi32(15));
  } else {
    static_assert(Bits == 8);
    __m128i bytes;
    std::memcpy(&bytes, reinterpret_cast<const uint8_t*>(w) + 8 * e, 8);
    return _mm256_cvtepu8_epi32(bytes);
  }
}

// A block's four eighths as floats in nibble order (ops/low_bit_decode_order.h: eighth e is quads
// 2e and 2e + 1): one load of its four words into both halves, then one mask each (and one shift
// for the last), no per-lane shifts.
RQAT_AVX2_INLINE void nibble_eighths(const uint32_t* w, __m256 (&codes)[4]) {
  const __m256i words =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  static_assert(nibble_shift(2) == 8 && nibble_shift(4) == 16 && nibble_shift(6) == 16);
  const __m256i mask0 = _mm256_setr_epi32(0xF, 0xF, 0xF, 0xF, 0xF0, 0xF0, 0xF0, 0xF0);
  const __m256i mask1 = _mm256_slli_epi32(mask0, 8), mask2 = _mm256_slli_epi32(mask0, 16);
  codes[0] = _mm256_cvtepi32_ps(_mm256_and_si256(words, mask0));
  codes[1] = _mm256_cvtepi32_ps(_mm256_and_si256(words, mask1));
  codes[2] = _mm256_cvtepi32_ps(_mm256_and_si256(words, mask2));
  // Nibbles 6 and 7 shifted down by 8 first: nibble 7 in place would be a negative int32.
  codes[3] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(words, 8), mask2));
}

RQAT_AVX2_INLINE float lane_sum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// The 8 sums of v[0] .. v[7], lane j holding v[j]'s: three rounds of pairwise additions.
RQAT_AVX2_INLINE __m256 eight_lane_sums(const __m256 (&v)[8]) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Groups g0 .. g0 + n - 1 (n <= 8) of a row's scales or zeros in lanes 0 .. n - 1, 0 beyond: from
// their exact float16 copies where the weight has them (half the bytes), else from float32.
RQAT_AVX2_INLINE __m256 eight_group_values(const float* f32, const uint16_t* f16, int64_t g0,
                                           int n) {
  if (n == 8)
    return f16 != nullptr
               ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f16 + g0)))
               : _mm256_loadu_ps(f32 + g0);
  alignas(32) float values[8] = {};
  for (int j = 0; j < n; ++j) values[j] = f16 != nullptr ? _cvtsh_ss(f16[g0 + j]) : f32[g0 + j];
  return _mm256_load_ps(values);
}

// Independent accumulators per row of x: at one row (decode) each eighth of a block has its own
// chain of fused multiply-adds, so a block's four never wait on each other (a group's chains start
// afresh, so consecutive groups overlap as well; W4 g128 at batch 1: 6% more tokens/s than with
// two chains, within build-layout noise); two chains at up to 4 rows, within the 16 registers at
// many (sets x rows <= 8).
template <int Rows>
constexpr int kSets = Rows == 1   ? 4
                      : Rows <= 4 ? 2
                                  : 1;

// Output rows [begin, end) for rows [b0, b0 + Rows) of x. The codes themselves are multiplied
// with x, as floats (small integers: exact), and each group's scale and zero are applied to its
// sum, scale * (sum_j x_j code_j - zero * sum_j x_j): two operations fewer per 8 weights than
// making every weight, and for a one-hot x still exactly the reference's (code - zero) * scale.
// A group's 8 lanes go to memory; every 8 groups their sums are made together (one horizontal
// reduction for 8 groups, not one per group) and scaled as one vector.
// 4 bits read x in nibble order (a.x_decode_order), the other widths a.x.
template <int Bits, int Rows>
RQAT_AVX2_INLINE void rows_tile(const LowBitKernelArgs& a, int64_t begin, int64_t end, int64_t b0) {
  constexpr bool kNibbles = Bits == 4;
  constexpr int kS = kSets<Rows>;
  const int64_t group_width = a.blocks_per_group * 32;
  __m256 group_lanes[Rows][8];
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    const float* row_scales = a.scales + o * a.groups;
    const float* row_zeros = a.zeros + o * a.groups;
    const uint16_t* row_scales16 = a.scales16 != nullptr ? a.scales16 + o * a.groups : nullptr;
    const uint16_t* row_zeros16 = a.zeros16 != nullptr ? a.zeros16 + o * a.groups : nullptr;
    __m256 total[Rows];
    for (int r = 0; r < Rows; ++r) total[r] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < a.groups; g0 += 8) {
      const int n = static_cast<int>(std::min<int64_t>(8, a.groups - g0));
      for (int j = 0; j < n; ++j) {
        __m256 acc[Rows][kS];
        for (int r = 0; r < Rows; ++r)
          for (int s = 0; s < kS; ++s) acc[r][s] = _mm256_setzero_ps();
        const uint32_t* block = row_codes + (g0 + j) * a.blocks_per_group * Bits;
        prefetch_codes_ahead(block);
        const float* xg =
            (kNibbles ? a.x_decode_order : a.x) + b0 * a.x_stride + (g0 + j) * group_width;
        for (int64_t k = 0; k < a.blocks_per_group; ++k) {
          if constexpr (kNibbles) {
            __m256 codes[4];
            nibble_eighths(block + k * Bits, codes);
            for (int e = 0; e < 4; ++e) {
              const float* xk = xg + k * 32 + 8 * e;
              for (int r = 0; r < Rows; ++r)
                acc[r][e % kS] =
                    _mm256_fmadd_ps(codes[e], _mm256_loadu_ps(xk + r * a.x_stride), acc[r][e % kS]);
            }
            continue;
          }
          for (int e = 0; e < 4; ++e) {
            const __m256 codes = _mm256_cvtepi32_ps(eighth_codes<Bits>(block + k * Bits, e));
            const float* xk = xg + k * 32 + 8 * e;
            for (int r = 0; r < Rows; ++r)
              acc[r][e % kS] =
                  _mm256_fmadd_ps(codes, _mm256_loadu_ps(xk + r * a.x_stride), acc[r][e % kS]);
          }
        }
        for (int r = 0; r < Rows; ++r)
          group_lanes[r][j] = kS == 1   ? acc[r][0]
                              : kS == 2 ? _mm256_add_ps(acc[r][0], acc[r][1])
                                        : _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]),
                                                        _mm256_add_ps(acc[r][2], acc[r][3]));
        static_assert(kS == 1 || kS == 2 || kS == 4);
      }
      // Fewer than 8 groups left: the missing ones add 0 (zero lanes, and zero scales below).
      for (int j = n; j < 8; ++j)
        for (int r = 0; r < Rows; ++r) group_lanes[r][j] = _mm256_setzero_ps();
      const __m256 vscale = eight_group_values(row_scales, row_scales16, g0, n);
      const __m256 vzero = a.zeros_shared ? _mm256_set1_ps(a.zeros[0])
                                          : eight_group_values(row_zeros, row_zeros16, g0, n);
      for (int r = 0; r < Rows; ++r) {
        const __m256 vxsum = eight_group_values(a.xsum + (b0 + r) * a.groups, nullptr, g0, n);
        const __m256 sums = eight_lane_sums(group_lanes[r]);
        // scale * (sum - zero * xsum): for a one-hot x the sum and zero * xsum are exact, so the
        // one rounding is that of (code - zero) * scale, the reference's weight.
        total[r] = _mm256_add_ps(
            total[r], _mm256_mul_ps(vscale, _mm256_sub_ps(sums, _mm256_mul_ps(vzero, vxsum))));
      }
    }
    for (int r = 0; r < Rows; ++r) a.y[(b0 + r) * a.out + o] = lane_sum(total[r]);
  }
}

template <int Bits>
RQAT_AVX2_FN void rows_task(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  int64_t b0 = 0;
  for (; b0 + 8 <= a.batch; b0 += 8) rows_tile<Bits, 8>(a, begin, end, b0);
  switch (a.batch - b0) {  // the last rows, with a tile of their own size
    case 7:
      return rows_tile<Bits, 7>(a, begin, end, b0);
    case 6:
      return rows_tile<Bits, 6>(a, begin, end, b0);
    case 5:
      return rows_tile<Bits, 5>(a, begin, end, b0);
    case 4:
      return rows_tile<Bits, 4>(a, begin, end, b0);
    case 3:
      return rows_tile<Bits, 3>(a, begin, end, b0);
    case 2:
      return rows_tile<Bits, 2>(a, begin, end, b0);
    case 1:
      return rows_tile<Bits, 1>(a, begin, end, b0);
    default:
      return;
  }
}

template <int Bits>
RQAT_AVX2_FN void dequantize_task(const LowBitKernelArgs& a, int64_t begin, int64_t end,
                                  float* out) {
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    float* row_out = out + (o - begin) * a.x_stride;
    for (int64_t g = 0; g < a.groups; ++g) {
      const __m256 vscale = _mm256_set1_ps(a.scales[o * a.groups + g]),
                   vzero = _mm256_set1_ps(a.zeros[o * a.groups + g]);
      const uint32_t* block = row_codes + g * a.blocks_per_group * Bits;
      float* group_out = row_out + g * a.blocks_per_group * 32;
      for (int64_t k = 0; k < a.blocks_per_group; ++k)
        for (int e = 0; e < 4; ++e) {
          const __m256 codes = _mm256_cvtepi32_ps(eighth_codes<Bits>(block + k * Bits, e));
          _mm256_storeu_ps(group_out + k * 32 + 8 * e,
                           _mm256_mul_ps(_mm256_sub_ps(codes, vzero), vscale));
        }
    }
  }
}

}  // namespace

bool low_bit_matmul_avx2_built() { return true; }

void low_bit_dequantize_avx2_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end,
                                  float* out) {
  switch (args.bits) {
    case 2:
      return dequantize_task<2>(args, begin, end, out);
    case 3:
      return dequantize_task<3>(args, begin, end, out);
    case 4:
      return dequantize_task<4>(args, begin, end, out);
    default:
      return dequantize_task<8>(args, begin, end, out);
  }
}

void low_bit_matmul_avx2_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end) {
  switch (args.bits) {
    case 2:
      return rows_task<2>(args, begin, end);
    case 3:
      return rows_task<3>(args, begin, end);
    case 4:
      if (args.x_decode_order == nullptr)
        fail("low_bit_matmul_avx2_rows: 4 bits need x in nibble order (args.x_decode_order)");
      return rows_task<4>(args, begin, end);
    default:
      return rows_task<8>(args, begin, end);
  }
}

#else

bool low_bit_matmul_avx2_built() { return false; }

void low_bit_matmul_avx2_rows(const LowBitKernelArgs&, int64_t, int64_t) {
  fail("low_bit_matmul: this build has no AVX2 kernel");
}

void low_bit_dequantize_avx2_rows(const LowBitKernelArgs&, int64_t, int64_t, float*) {
  fail("low_bit_matmul: this build has no AVX2 kernel");
}

#endif

}  // namespace rqat::ops
