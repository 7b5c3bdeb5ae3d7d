// What every thread of the wide packed low-bit GEMV (cuda/low_bit_gemv_wide.cu) computes, written
// once for nvcc and g++ like cuda/low_bit_gemv_lanes.cuh (whose decode and unit arithmetic it
// reuses): tests/test_low_bit_gemv_wide_lanes.cpp runs these functions thread by thread on the CPU.
//
// The decode GEMV of 1-4 rows of x (batch-1 decoding) is a stream over the weight: it runs at the
// speed of HBM only with many 16-byte loads in flight on every SM and little work per byte
// besides the decode. So, against the first GEMV (cuda/low_bit_gemv_lanes.cuh: 8-byte units, one
// per thread per row, which measured 18-24% of an H200's bandwidth):
//   - a thread's unit of work is a *step*: 16 bytes of one row's codes per load, kWideSteps<Bits>
//     blocks of 32 codes (W4: 1 block, one 16-byte load; W2: 2 blocks, one load; W8: 1 block, two
//     loads; W3: 4 blocks, three loads). In the load-time layout (lib/ops/low_bit_weight.h) a
//     row's blocks are consecutive words, so a step is contiguous, and 16-byte aligned whenever
//     the row has a whole number of steps (blocks_per_row % kWideSteps == 0, which every real
//     layer width meets: W3 needs rows of a multiple of 128 columns). No second copy of the
//     weight is needed; other shapes take the first GEMV (wide_gemv_applies).
//   - lanes of a warp take consecutive steps of a row: a warp's load is 512 contiguous bytes;
//   - a CTA owns kWideRows<Bits> output rows (8; 4 for W3 and W8, whose steps take more
//     registers), and every step's loads for all of them are issued before any decode, so each
//     thread has 8 x 16 bytes in flight; x is read once per unit for all of the CTA's rows;
//   - a thread takes up to kWideStepsPerThread steps of each row (fewer threads per CTA for short
//     rows, so no lane idles on a 1,024-wide layer), which is the split of the rows' K among the
//     CTA's threads; their sums are reduced once per CTA (shuffles, then shared memory);
//   - scale and zero are read once per block for all its 32 codes.
// The arithmetic per unit of 16 codes is the first GEMV's (accumulate_unit_words), so both give
// the same results to float32 summation order.
#pragma once

#include "cuda/low_bit_gemv_lanes.cuh"

namespace rqat::cuda {

inline constexpr int64_t kLowBitGemvWideMaxRows = 4;  // rows of x the wide kernel takes
inline constexpr int kWideThreads = 256;              // at most, per CTA
inline constexpr int kWideStepsPerThread = 2;         // of each row, before more threads are added

// Blocks of 32 codes per step (16 bytes per load, C loads per step).
template <int Bits>
inline constexpr int kWideSteps = Bits == 2 ? 2 : (Bits == 3 ? 4 : 1);
template <int Bits>
inline constexpr int kWideLoads = kWideSteps<Bits>* Bits / 4;  // 16-byte loads per step
template <int Bits>
inline constexpr int kWideRows = kWideLoads<Bits> == 1 ? 8 : 4;  // output rows per CTA

// The geometry of a call, from the weight's shape and bits (runtime values for the launcher).
struct WideGeometry {
  int steps = 1, rows_per_cta = 8;
  int64_t steps_per_row = 0;
  RQAT_LANE int threads() const {
    const int64_t per_warp = 32 * static_cast<int64_t>(kWideStepsPerThread);
    const int64_t warps = (steps_per_row + per_warp - 1) / per_warp;
    return warps >= kWideThreads / 32 ? kWideThreads
                                      : static_cast<int>(32 * (warps < 1 ? 1 : warps));
  }
};

RQAT_LANE WideGeometry wide_geometry(const LowBitGemvArgs& a) {
  WideGeometry g;
  g.steps = a.bits == 2 ? 2 : (a.bits == 3 ? 4 : 1);
  g.rows_per_cta = a.bits == 3 || a.bits == 8 ? 4 : 8;
  g.steps_per_row = a.groups * a.blocks_per_group / g.steps;
  return g;
}

// Whether the wide kernel takes this call: 1-4 rows of x, and rows of whole (so 16-byte aligned)
// steps.
RQAT_LANE bool wide_gemv_applies(const LowBitGemvArgs& a) {
  if (a.rows < 1 || a.rows > kLowBitGemvWideMaxRows) return false;
  if (a.bits != 2 && a.bits != 3 && a.bits != 4 && a.bits != 8) return false;
  const WideGeometry g = wide_geometry(a);
  return (a.groups * a.blocks_per_group) % g.steps == 0 && g.steps_per_row > 0;
}

RQAT_LANE int64_t wide_ctas(const LowBitGemvArgs& a) {
  const int64_t per = wide_geometry(a).rows_per_cta;
  return (a.out + per - 1) / per;
}

// The kUnitWords words of unit `half` (0, 1) of a block whose `Bits` words are in registers: what
// load_unit_words reads from memory.
template <int Bits>
RQAT_LANE void unit_words_of_block(const uint32_t* block, int half,
                                   uint32_t (&w)[kUnitWords<Bits>]) {
  if constexpr (Bits == 2) {
    w[0] = block[half];
  } else if constexpr (Bits == 3) {
    w[0] = block[half];
    w[1] = block[2] >> (16 * half);
  } else if constexpr (Bits == 4) {
    w[0] = block[2 * half];
    w[1] = block[2 * half + 1];
  } else {
    static_assert(Bits == 8);
    RQAT_UNROLL
    for (int i = 0; i < 4; ++i) w[i] = block[4 * half + i];
  }
}

// Thread `thread` of CTA `cta`: its partial sums over its steps of each of the CTA's rows.
template <int Bits, int Rows, typename In>
RQAT_LANE void wide_thread_partial_sums(const LowBitGemvArgs& a, int64_t cta, int thread,
                                        float (&acc)[kWideRows<Bits>][Rows]) {
  constexpr int R = kWideRows<Bits>, S = kWideSteps<Bits>, L = kWideLoads<Bits>;
  RQAT_UNROLL
  for (int i = 0; i < R; ++i) {
    RQAT_UNROLL
    for (int r = 0; r < Rows; ++r) acc[i][r] = 0.f;
  }
  const WideGeometry geometry = wide_geometry(a);
  const int threads = geometry.threads();
  const int64_t o0 = cta * R;
  for (int64_t step = thread; step < geometry.steps_per_row; step += threads) {
    // Every row's loads first: R x L 16-byte loads in flight before the first decode.
    uint32_t words[R][4 * L];
    RQAT_UNROLL
    for (int i = 0; i < R; ++i) {
      const int64_t o = o0 + i;
      RQAT_UNROLL
      for (int l = 0; l < L; ++l) {
        Words4 p{};  // rows past the end read as zero codes (with zero scales: they add 0)
        if (o < a.out) p = load_aligned<Words4>(a.codes + o * a.words_per_row + (step * L + l) * 4);
        RQAT_UNROLL
        for (int k = 0; k < 4; ++k) words[i][4 * l + k] = p.w[k];
      }
    }
    RQAT_UNROLL
    for (int j = 0; j < S; ++j) {
      const int64_t block = step * S + j;
      const int64_t g = static_cast<uint32_t>(block) / static_cast<uint32_t>(a.blocks_per_group);
      float scale[R], zero_scale[R];
      RQAT_UNROLL
      for (int i = 0; i < R; ++i) {
        const int64_t o = o0 + i;
        scale[i] = o < a.out ? a.scales[o * a.groups + g] : 0.f;
        zero_scale[i] = o < a.out ? a.zeros[o * a.groups + g] * scale[i] : 0.f;
      }
      RQAT_UNROLL
      for (int half = 0; half < 2; ++half) {
        const UnitColumns c = unit_columns(a, 2 * block + half);
        if (c.valid == 0) continue;  // a group's padding to whole blocks
        uint32_t unit[R][kUnitWords<Bits>];
        RQAT_UNROLL
        for (int i = 0; i < R; ++i) unit_words_of_block<Bits>(&words[i][j * Bits], half, unit[i]);
        accumulate_unit_words<Bits, Rows, R, In>(a, c, unit, scale, zero_scale, acc);
      }
    }
  }
}

// The template arguments of a wide call: rows of x 1, 2 or 4 (a.rows checks the rest), bits and
// dtype. Calls visitor.template run<Bits, Rows, In>(); `invalid` when the wide kernel does not
// apply (wide_gemv_applies).
template <typename Visitor>
int visit_low_bit_gemv_wide(const LowBitGemvArgs& a, Visitor&& visitor, int invalid) {
  if (!wide_gemv_applies(a)) return invalid;
  return visit_bits(
      a.bits,
      [&](auto bits) {
        if (a.rows == 1)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 1>{});
        if (a.rows == 2)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 2>{});
        return visit_input_type(a, visitor, bits, std::integral_constant<int, 4>{});
      },
      invalid);
}

}  // namespace rqat::cuda
