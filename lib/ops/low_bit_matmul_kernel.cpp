// See low_bit_matmul_kernel.h. Each task owns a range of output rows; for each row it walks the
// groups, and in each group the blocks of 32 codes, 16 codes at a time: one broadcast of the
// word(s) that hold them and one lane-wise shift put each code in the low bits of its lane, and
// one permute of a 16-entry table of the group's dequantized values ((code - zero) * scale, made
// once per row and group: one vpermps on AVX-512) turns the codes into weights. AVX2 has a kernel
// of its own (ops/low_bit_matmul_avx2_kernel.h), and so have the baseline's 2-4-bit codes
// (ops/low_bit_matmul_narrow_kernel.h): without AVX-512 there is no 16-entry float permute (GCC
// would look the table up one lane at a time through memory). The weights are multiplied with up to
// 16 rows of x at once, so the codes of a weight row are read once per tile of 16 rows, and the
// lanes of a row are summed once, at its end. 8-bit codes (256 values, no table) are converted from
// bytes instead, and their scale and zero applied per group to the lane sums (zero times the
// group's precomputed sum of x). The task functions are compiled for AVX-512 and the baseline;
// ops/cpu_target.h picks one of them or the AVX2 kernel (forcible, for tests and benchmarks). The
// 64-byte lane type only ever lives in registers of always-inlined helpers (as in the attention
// kernels), so the calling convention GCC warns about never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "ops/low_bit_matmul_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/error.h"
#include "ops/cpu_target.h"
#include "ops/low_bit_decode_order.h"
#include "ops/low_bit_matmul_avx2_kernel.h"
#include "ops/low_bit_matmul_narrow_kernel.h"
#include "ops/vector_lanes.h"

#define RQAT_INLINE inline __attribute__((always_inline))

namespace rqat::ops {
namespace {

constexpr int kLanes = 16;
constexpr int kTile = 16;  // rows of x per pass over a weight row
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
using Words = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
using Ints = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
RQAT_INLINE float lane_sum(Floats v) { return lane_sum16(v); }

// Codes 16*half .. 16*half + 15 of the block of 32 at `w` (see low_bit_weight.h).
// 2, 3 and 4 bits: each lane's code as a table index (only its low Bits bits count, see decode()).
// 8 bits: the codes as floats.
template <int Bits>
RQAT_INLINE Words code_indices(const uint32_t* w, int half) {
  // Every lane gets the word that holds its code by a broadcast, then its own shift.
  if constexpr (Bits == 2) {
    const Words shifts = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    return (Words{} + w[half]) >> shifts;  // bits 2-3 hold the next code: the table repeats
  } else if constexpr (Bits == 3) {
    // Bits 0-1 from the low plane; bit 2 from the high plane, where code 16 * half + j has bit
    // 16 * half + j: a right shift by j (first half, the plane shifted left by 2 beforehand) or by
    // 14 + j (second half) brings it to bit 2. Bits 3 and up are other codes' bits: the table
    // repeats every 8 entries.
    const Words low_shifts = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const Words iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const Words low = (Words{} + w[half]) >> low_shifts;
    const Words high =
        half == 0 ? (Words{} + (w[2] << 2)) >> iota : (Words{} + w[2]) >> (iota + 14u);
    return (low & 3u) | (high & ~3u);  // one bitwise select (vpternlogd on AVX-512)
  } else {
    static_assert(Bits == 4);
    // Words 2h (even codes) and 2h+1 (odd codes) broadcast as one 64-bit value: lane j holds
    // word 2h + j%2, whose field j/2 is code j.
    using Pairs = uint64_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
    uint64_t pair;
    std::memcpy(&pair, w + 2 * half, sizeof pair);
    const Words words = reinterpret_cast<Words>(Pairs{} + pair);
    const Words shifts = {0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28};
    return words >> shifts;  // higher bits hold other codes: the lookup takes the low 4
  }
}

RQAT_INLINE Floats bytes_to_floats(const uint32_t* w, int half) {
  using Bytes = uint8_t __attribute__((vector_size(16)));
  Bytes bytes;  // 8 bits: the 16 bytes of the half-block are its 16 codes, in order
  std::memcpy(&bytes, w + 4 * half, sizeof bytes);
  return __builtin_convertvector(bytes, Floats);
}

// The dequantized values of one row's group, (c - zero) * scale for every code c (repeated to 16
// lanes for 2 and 3 bits), so a lane's weight is one permute of its index (vpermps on AVX-512:
// index taken modulo 16), exactly the reference's float32 (code - zero) * scale.
template <int Bits>
RQAT_INLINE Floats dequantized_table(float scale, float zero) {
  const Floats iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  constexpr unsigned kMask = (1u << Bits) - 1;
  const Floats codes =
      __builtin_convertvector(__builtin_convertvector(iota, Words) & kMask, Floats);
  return (codes - zero) * scale;
}

// The group's table (8 bits have none: their codes are converted, see block_dot).
template <int Bits>
RQAT_INLINE Floats group_table(float scale, float zero) {
  if constexpr (Bits == 8)
    return Floats{};
  else
    return dequantized_table<Bits>(scale, zero);
}

// Each lane's weight: its index looked up in the group's table (index taken modulo 16).
RQAT_INLINE Floats decode(Floats table, Words indices) {
  return __builtin_shuffle(table, reinterpret_cast<Ints>(indices));
}

// One block of 32 codes against the same 32 columns of Rows rows of x: the first half-block into
// `lo`, the second into `hi`. 2-4 bits add dequantized weights (table); 8 bits add the codes
// (scale and zero applied per group by the caller).
template <int Bits, int Rows>
RQAT_INLINE void block_dot(const uint32_t* block, Floats table, const float* x, int64_t x_stride,
                           Floats (&lo)[Rows], Floats (&hi)[Rows]) {
  for (int half = 0; half < 2; ++half) {
    Floats weights;
    if constexpr (Bits == 8)
      weights = bytes_to_floats(block, half);
    else
      weights = decode(table, code_indices<Bits>(block, half));
    Floats(&acc)[Rows] = half == 0 ? lo : hi;
    for (int r = 0; r < Rows; ++r)
      acc[r] += weights * load_lanes<Floats>(x + r * x_stride + 16 * half);
  }
}

// Output rows [begin, end) for rows [b0, b0 + Rows) of x. With few rows of x, two blocks at a time
// into four accumulator sets, so the multiply-adds of a row do not wait on each other's latency;
// with more rows, the rows give that independence (and four sets would not fit the registers).
// 2-4 bits: the table's weights are final, so the lanes accumulate across all groups of the row and
// are summed once at its end; 8 bits: scale and zero apply per group to the group's lane sums.
template <int Bits, int Rows>
RQAT_INLINE void rows_tile(const LowBitKernelArgs& a, int64_t begin, int64_t end, int64_t b0) {
  constexpr bool kFourSets = Rows <= 2;
  constexpr bool kOneSet = Rows > 8;  // 16 rows: one set (both half-blocks) fills the registers
  const int64_t group_width = a.blocks_per_group * 32;
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    float total[Rows] = {};
    Floats acc0[Rows], acc1[Rows], acc2[Rows], acc3[Rows];
    const auto clear = [&] {
      for (int r = 0; r < Rows; ++r) acc0[r] = acc1[r] = acc2[r] = acc3[r] = Floats{};
    };
    const auto lanes_sum = [&](int r) {
      return lane_sum(kFourSets ? (acc0[r] + acc1[r]) + (acc2[r] + acc3[r]) : acc0[r] + acc1[r]);
    };
    clear();
    for (int64_t g = 0; g < a.groups; ++g) {
      const float scale = a.scales[o * a.groups + g], zero = a.zeros[o * a.groups + g];
      const Floats table = group_table<Bits>(scale, zero);
      const uint32_t* block = row_codes + g * a.blocks_per_group * Bits;
      prefetch_codes_ahead(block);
      const float* xg = a.x + b0 * a.x_stride + g * group_width;
      int64_t k = 0;
      if constexpr (kFourSets) {
        for (; k + 2 <= a.blocks_per_group; k += 2) {
          block_dot<Bits, Rows>(block + k * Bits, table, xg + k * 32, a.x_stride, acc0, acc1);
          block_dot<Bits, Rows>(block + (k + 1) * Bits, table, xg + k * 32 + 32, a.x_stride, acc2,
                                acc3);
        }
      }
      for (; k < a.blocks_per_group; ++k)
        block_dot<Bits, Rows>(block + k * Bits, table, xg + k * 32, a.x_stride, acc0,
                              kOneSet ? acc0 : acc1);
      if constexpr (Bits == 8) {
        for (int r = 0; r < Rows; ++r)
          total[r] += scale * (lanes_sum(r) - zero * a.xsum[(b0 + r) * a.groups + g]);
        clear();
      }
    }
    if constexpr (Bits != 8)
      for (int r = 0; r < Rows; ++r) total[r] = lanes_sum(r);
    for (int r = 0; r < Rows; ++r) a.y[(b0 + r) * a.out + o] = total[r];
  }
}

template <int Bits>
RQAT_INLINE void rows_task(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  int64_t b0 = 0;
  for (; b0 + kTile <= a.batch; b0 += kTile) rows_tile<Bits, kTile>(a, begin, end, b0);
  if (b0 + 8 <= a.batch) {
    rows_tile<Bits, 8>(a, begin, end, b0);
    b0 += 8;
  }
  switch (a.batch - b0) {  // the last rows, with a tile of their own size (no wasted lanes)
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

// Weight rows [begin, end) dequantized into `out` (x_stride floats a row): every block's 32 codes
// decoded 16 at a time as the kernel decodes them, 8 bits included ((code - zero) * scale).
template <int Bits>
RQAT_INLINE void dequantize_task(const LowBitKernelArgs& a, int64_t begin, int64_t end,
                                 float* out) {
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* row_codes = a.codes + o * a.words_per_row;
    float* row_out = out + (o - begin) * a.x_stride;
    for (int64_t g = 0; g < a.groups; ++g) {
      const float scale = a.scales[o * a.groups + g], zero = a.zeros[o * a.groups + g];
      const Floats table = group_table<Bits>(scale, zero);
      const uint32_t* block = row_codes + g * a.blocks_per_group * Bits;
      float* group_out = row_out + g * a.blocks_per_group * 32;
      for (int64_t k = 0; k < a.blocks_per_group; ++k) {
        for (int half = 0; half < 2; ++half) {
          Floats weights;
          if constexpr (Bits == 8) {
            weights = (bytes_to_floats(block + k * Bits, half) - splat_lanes<Floats>(zero)) *
                      splat_lanes<Floats>(scale);
          } else {
            weights = decode(table, code_indices<Bits>(block + k * Bits, half));
          }
          store_lanes(group_out + k * 32 + 16 * half, weights);
        }
      }
    }
  }
}

// One function per target (ops/cpu_target.h) and width; avx2 is ops/low_bit_matmul_avx2_kernel.h.
template <int Bits>
void rows_baseline(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  rows_task<Bits>(a, begin, end);
}
template <int Bits>
void dequantize_baseline(const LowBitKernelArgs& a, int64_t begin, int64_t end, float* out) {
  dequantize_task<Bits>(a, begin, end, out);
}
#ifdef RQAT_X86_TARGETS
template <int Bits>
RQAT_TARGET_AVX512 void rows_avx512(const LowBitKernelArgs& a, int64_t begin, int64_t end) {
  rows_task<Bits>(a, begin, end);
}
template <int Bits>
RQAT_TARGET_AVX512 void dequantize_avx512(const LowBitKernelArgs& a, int64_t begin, int64_t end,
                                          float* out) {
  dequantize_task<Bits>(a, begin, end, out);
}
#endif

template <int Bits>
void rows_on(CpuTarget target, const LowBitKernelArgs& a, int64_t begin, int64_t end) {
#ifdef RQAT_X86_TARGETS
  if (target == CpuTarget::kAvx512) return rows_avx512<Bits>(a, begin, end);
#endif
  (void)target;
  // The baseline's 2-4-bit rows are ops/low_bit_matmul_narrow_kernel.h's.
  if constexpr (Bits != 8)
    fail("low_bit_matmul: the baseline's {}-bit rows run low_bit_matmul_narrow_rows", Bits);
  else
    rows_baseline<Bits>(a, begin, end);
}

template <int Bits>
void dequantize_on(CpuTarget target, const LowBitKernelArgs& a, int64_t begin, int64_t end,
                   float* out) {
#ifdef RQAT_X86_TARGETS
  if (target == CpuTarget::kAvx512) return dequantize_avx512<Bits>(a, begin, end, out);
#endif
  (void)target;
  // The baseline's 2-4-bit tiles are ops/low_bit_matmul_narrow_kernel.h's.
  if constexpr (Bits != 8)
    fail("low_bit_matmul: the baseline's {}-bit tiles run low_bit_dequantize_narrow_rows", Bits);
  else
    dequantize_baseline<Bits>(a, begin, end, out);
}

}  // namespace

void low_bit_matmul_cpu(const LowBitKernelArgs& args_in) {
  // A grain that gives every thread several chunks of rows: weight rows are independent.
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, args_in.out / 64));
  const CpuTarget target = cpu_target();
  // The 4-bit code of AVX2 and the baseline's 2-4-bit code read x in their decode order, made
  // once here for every output row (AVX-512 looks codes up in a table instead).
  LowBitKernelArgs args = args_in;
  const bool narrow = target == CpuTarget::kBaseline && args.bits <= 4;
  std::vector<float> x_decode_order;
  if (narrow || (target == CpuTarget::kAvx2 && args.bits == 4)) {
    x_decode_order.resize(args.batch * args.x_stride);
    low_bit_x_in_decode_order(args, x_decode_order.data());
    args.x_decode_order = x_decode_order.data();
  }
  at::parallel_for(0, args.out, grain, [&](int64_t begin, int64_t end) {
    // The AVX2 kernel and the baseline's 2-4-bit one are files of their own.
    if (target == CpuTarget::kAvx2) return low_bit_matmul_avx2_rows(args, begin, end);
    if (narrow) return low_bit_matmul_narrow_rows(args, begin, end);
    switch (args.bits) {
      case 2:
        return rows_on<2>(target, args, begin, end);
      case 3:
        return rows_on<3>(target, args, begin, end);
      case 4:
        return rows_on<4>(target, args, begin, end);
      default:
        return rows_on<8>(target, args, begin, end);
    }
  });
}

void low_bit_dequantize_rows(const LowBitKernelArgs& args, int64_t begin, int64_t end, float* out) {
  const CpuTarget target = cpu_target();
  at::parallel_for(begin, end, /*grain_size=*/8, [&](int64_t first, int64_t last) {
    float* rows_out = out + (first - begin) * args.x_stride;
    if (target == CpuTarget::kAvx2)
      return low_bit_dequantize_avx2_rows(args, first, last, rows_out);
    if (target == CpuTarget::kBaseline && args.bits <= 4)
      return low_bit_dequantize_narrow_rows(args, first, last, rows_out);
    switch (args.bits) {
      case 2:
        return dequantize_on<2>(target, args, first, last, rows_out);
      case 3:
        return dequantize_on<3>(target, args, first, last, rows_out);
      case 4:
        return dequantize_on<4>(target, args, first, last, rows_out);
      default:
        return dequantize_on<8>(target, args, first, last, rows_out);
    }
  });
}

}  // namespace rqat::ops
