// What every thread of the packed low-bit GEMV (cuda/low_bit_gemv.cu) computes, written once for
// nvcc (the kernel) and g++ (tests/test_low_bit_gemv_lanes.cpp runs these functions thread by
// thread on the CPU), so the kernel's indexing and arithmetic are tested on machines without a GPU.
// Only the kernel's sum over its threads (warp shuffles, shared memory) is CUDA-only.
//
// Work split. A CTA owns kGemvRowsPerCta consecutive output rows and all their columns. Columns
// come in units of 16 codes (half a block of 32 in the layout of lib/ops/low_bit_weight.h); thread
// t of the CTA takes units t, t + threads(), ... of each of its rows. So a warp reads 32
// consecutive units of a row per step (one contiguous run of 32 x 16 x bits bits, vector loads),
// and the 16 columns of x a unit needs are loaded once (four at a time) for all the CTA's rows.
// Decode without an int-to-float conversion (slow on GPUs) and without shifting codes down: a code
// c at bit p of its word is masked in place, and the float with bits 0x4B000000 | (c << p), which
// is 2^23 + c * 2^p, minus 2^23 is c * 2^p; x's column is multiplied by 2^-p once for all the
// CTA's rows. Each weight then costs one multiply-add with each row of x into a per-unit float32
// dot product; scale and zero apply once per unit: scale * dot - zero * scale * sum(x).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#if defined(__CUDACC__)
#define RQAT_LANE __host__ __device__ __forceinline__
#define RQAT_UNROLL _Pragma("unroll")
#else
#define RQAT_LANE inline
#define RQAT_UNROLL
#endif

namespace rqat::cuda {

inline constexpr int kGemvRowsPerCta = 4;  // output rows per CTA: each x load serves all of them
inline constexpr int kGemvThreads = 256;
inline constexpr int64_t kLowBitGemvMaxRows = 16;  // rows of x the kernel takes

// bfloat16 as its bits (at::BFloat16 and __nv_bfloat16 have this layout).
struct Bf16 {
  uint16_t bits;
};

// One call: x and y in the same dtype (float32 or bfloat16), raw pointers and sizes only.
struct LowBitGemvArgs {
  const void* x = nullptr;  // (rows, x_stride): the inputs in kernel column order, not padded
  int64_t x_stride = 0;     // elements between rows of x
  bool x_bf16 = false;      // x and y are bfloat16 (else float32)
  bool x_vector = false;    // every unit's 16 columns of x are whole and 16-byte aligned
  int64_t rows = 0;         // rows of x, 1..kLowBitGemvMaxRows
  int64_t in_features = 0, group_size = 0, groups = 0, blocks_per_group = 0, words_per_row = 0;
  int bits = 4;                     // 2, 3, 4 or 8
  const uint32_t* codes = nullptr;  // (out, words_per_row), 16-byte aligned
  const float* scales = nullptr;    // (out, groups)
  const float* zeros = nullptr;     // (out, groups), in code units
  int64_t out = 0;
  void* y = nullptr;  // (rows, out), x's dtype

  RQAT_LANE int64_t units_per_row() const { return groups * blocks_per_group * 2; }
  RQAT_LANE int64_t ctas() const { return (out + kGemvRowsPerCta - 1) / kGemvRowsPerCta; }
  // Threads per CTA: one per unit of a row, in whole warps, at most kGemvThreads (a 1024-wide
  // layer's 64 units would leave three quarters of 256 threads idle).
  RQAT_LANE int threads() const {
    const int64_t warps = (units_per_row() + 31) / 32;
    return warps >= kGemvThreads / 32 ? kGemvThreads
                                      : static_cast<int>(warps < 1 ? 32 : 32 * warps);
  }
};

RQAT_LANE float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

RQAT_LANE uint32_t bits_of_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

RQAT_LANE float to_float(float v) { return v; }
RQAT_LANE float to_float(Bf16 v) { return float_from_bits(static_cast<uint32_t>(v.bits) << 16); }

RQAT_LANE void store_value(float* p, float v) { *p = v; }
// Round to nearest even, NaN kept a NaN (as c10::BFloat16 rounds).
RQAT_LANE void store_value(Bf16* p, float v) {
  const uint32_t u = bits_of_float(v);
  p->bits =
      v != v ? uint16_t{0x7FC0} : static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Aligned vector loads on the GPU (one 8- or 16-byte load instruction), plain copies on the CPU.
struct alignas(8) Words2 {
  uint32_t w[2];
};
struct alignas(16) Words4 {
  uint32_t w[4];
};
struct alignas(16) Floats4 {
  float v[4];
};
struct alignas(8) Bf16x4 {
  Bf16 v[4];
};

// On the CPU the alignment a GPU would fault on is checked, so the CPU test of these functions
// catches a misaligned vector load too.
template <typename T>
RQAT_LANE T load_aligned(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const T*>(p);
#else
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0)
    throw std::logic_error("low-bit GEMV: a vector load from a misaligned address");
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// The words that hold codes 16*half .. 16*half + 15 of the block of 32 at `block`.
template <int Bits>
inline constexpr int kUnitWords = Bits == 8 ? 4 : (Bits == 2 ? 1 : 2);

template <int Bits>
RQAT_LANE void load_unit_words(const uint32_t* block, int half, uint32_t (&w)[kUnitWords<Bits>]) {
  if constexpr (Bits == 2) {
    w[0] = block[half];
  } else if constexpr (Bits == 3) {
    w[0] = block[half];              // low 2 bits of the half's 16 codes
    w[1] = block[2] >> (16 * half);  // their high bits
  } else if constexpr (Bits == 4) {
    const Words2 p = load_aligned<Words2>(block + 2 * half);  // even codes, odd codes
    w[0] = p.w[0];
    w[1] = p.w[1];
  } else {
    static_assert(Bits == 8);
    const Words4 p = load_aligned<Words4>(block + 4 * half);
    for (int i = 0; i < 4; ++i) w[i] = p.w[i];
  }
}

// Where code t (0..15) of a unit sits: in word code_word(t) of load_unit_words, at bit code_bit(t)
// (W3: its low 2 bits; the high bit is bit t of word 1).
template <int Bits>
RQAT_LANE constexpr int code_word(int t) {
  return Bits == 4 ? (t & 1) : Bits == 8 ? (t >> 2) : 0;
}
template <int Bits>
RQAT_LANE constexpr int code_bit(int t) {
  return Bits == 4 ? 4 * (t >> 1) : Bits == 8 ? 8 * (t & 3) : 2 * t;
}
// A code is read where it sits, as code * 2^code_scale_bits(t) (no shift down: one instruction
// fewer), as long as that stays below 2^23 (see scaled_code); fields higher up are read from the
// word's upper half shifted down by 16.
template <int Bits>
RQAT_LANE constexpr int code_scale_bits(int t) {
  return Bits == 3 ? 0 : code_bit<Bits>(t) + Bits > 23 ? code_bit<Bits>(t) - 16 : code_bit<Bits>(t);
}
// 2^-code_scale_bits(t): what x's column t is multiplied by so that products are code * x.
template <int Bits>
RQAT_LANE constexpr float code_unscale(int t) {
  return static_cast<float>(1.0 / static_cast<double>(1u << code_scale_bits<Bits>(t)));
}

// Code t of a unit times 2^code_scale_bits(t), as a float, exactly: the float with bits 0x4B000000
// | v is 2^23 + v for any v < 2^23, so masking the code in place, setting those exponent bits and
// subtracting 2^23 is the whole conversion (no int-to-float instruction, slow on GPUs).
template <int Bits>
RQAT_LANE float scaled_code(const uint32_t (&w)[kUnitWords<Bits>], int t) {
  constexpr uint32_t kMask = (1u << Bits) - 1;
  uint32_t field;
  if constexpr (Bits == 3) {
    field = ((w[0] >> (2 * t)) & 3u) | (((w[1] >> t) & 1u) << 2);
  } else {
    const int bit = code_bit<Bits>(t), scale_bits = code_scale_bits<Bits>(t);
    const uint32_t word = w[code_word<Bits>(t)];
    field = (scale_bits == bit ? word : word >> 16) & (kMask << scale_bits);
  }
  return float_from_bits(field | 0x4B000000u) - 8388608.f;
}

// Columns 4q .. 4q + 3 of a unit whose first column is `col`, `valid` of its 16 columns real (the
// rest read as 0).
template <typename In>
RQAT_LANE void load_x4(const In* row, int64_t col, int q, int valid, bool vector, float (&v)[4]) {
  if (vector && valid == 16) {
    if constexpr (sizeof(In) == 4) {
      const Floats4 p = load_aligned<Floats4>(row + col + 4 * q);
      for (int t = 0; t < 4; ++t) v[t] = p.v[t];
    } else {
      const Bf16x4 p = load_aligned<Bf16x4>(row + col + 4 * q);
      for (int t = 0; t < 4; ++t) v[t] = to_float(p.v[t]);
    }
    return;
  }
  for (int t = 0; t < 4; ++t) v[t] = 4 * q + t < valid ? to_float(row[col + 4 * q + t]) : 0.f;
}

// Where unit `unit` (16 columns: half of block unit / 2) of a row lies among x's columns: its first
// column `col` and how many of its 16 columns are real (`valid`; 0 for a group's padding to whole
// blocks, which adds nothing).
struct UnitColumns {
  int64_t col = 0;
  int valid = 0;
};
RQAT_LANE UnitColumns unit_columns(const LowBitGemvArgs& a, int64_t unit) {
  const int64_t block = unit >> 1;
  const int half = static_cast<int>(unit & 1);
  // 32-bit division (a 64-bit one is a long subroutine on GPUs): rows have far below 2^31 blocks.
  const int64_t g = static_cast<uint32_t>(block) / static_cast<uint32_t>(a.blocks_per_group);
  const int64_t first = (block - g * a.blocks_per_group) * 32 + 16 * half;  // within the group
  const int64_t group_length = a.group_size < a.in_features - g * a.group_size
                                   ? a.group_size
                                   : a.in_features - g * a.group_size;
  UnitColumns c;
  if (first >= group_length) return c;
  c.valid = group_length - first < 16 ? static_cast<int>(group_length - first) : 16;
  c.col = g * a.group_size + first;
  return c;
}

// Adds one unit of R rows of W, given as their words (kUnitWords each, as load_unit_words gives),
// scales and zero * scale, times every row of x into acc[row of W][row of x]. Rows <= Rows of x are
// real (a.rows of them). Per row of W and of x: dot = sum_t code_t * x_t (x pre-scaled for the
// codes read in place), then acc += scale * dot - zero * scale * sum_t x_t, so a weight costs its
// decode and one multiply-add.
template <int Bits, int Rows, int R, typename In>
RQAT_LANE void accumulate_unit_words(const LowBitGemvArgs& a, UnitColumns c,
                                     const uint32_t (&words)[R][kUnitWords<Bits>],
                                     const float (&scale)[R], const float (&zero_scale)[R],
                                     float (&acc)[R][Rows]) {
  float dot[R][Rows], x_sum[Rows];
  RQAT_UNROLL
  for (int r = 0; r < Rows; ++r) {
    x_sum[r] = 0.f;
    RQAT_UNROLL
    for (int i = 0; i < R; ++i) dot[i][r] = 0.f;
  }
  const In* x = static_cast<const In*>(a.x);
  RQAT_UNROLL
  for (int q = 0; q < 4; ++q) {
    if (4 * q >= c.valid) break;
    float codes[R][4];
    RQAT_UNROLL
    for (int i = 0; i < R; ++i) {
      RQAT_UNROLL
      for (int t = 0; t < 4; ++t) codes[i][t] = scaled_code<Bits>(words[i], 4 * q + t);
    }
    RQAT_UNROLL
    for (int r = 0; r < Rows; ++r) {
      if (r >= a.rows) break;
      float xv[4];
      load_x4<In>(x + r * a.x_stride, c.col, q, c.valid, a.x_vector, xv);
      RQAT_UNROLL
      for (int t = 0; t < 4; ++t) {
        x_sum[r] += xv[t];
        xv[t] *= code_unscale<Bits>(4 * q + t);  // exact: a power of two
      }
      RQAT_UNROLL
      for (int i = 0; i < R; ++i) {
        RQAT_UNROLL
        for (int t = 0; t < 4; ++t) dot[i][r] = fmaf(codes[i][t], xv[t], dot[i][r]);
      }
    }
  }
  RQAT_UNROLL
  for (int r = 0; r < Rows; ++r) {
    if (r >= a.rows) break;
    RQAT_UNROLL
    for (int i = 0; i < R; ++i) acc[i][r] += fmaf(scale[i], dot[i][r], -zero_scale[i] * x_sum[r]);
  }
}

// Adds one unit (16 columns) of the CTA's rows o0 .. o0 + kGemvRowsPerCta - 1, read from memory.
template <int Bits, int Rows, typename In>
RQAT_LANE void accumulate_unit(const LowBitGemvArgs& a, int64_t o0, int64_t unit,
                               float (&acc)[kGemvRowsPerCta][Rows]) {
  const UnitColumns c = unit_columns(a, unit);
  if (c.valid == 0) return;  // a group's padding to whole blocks
  const int64_t block = unit >> 1;
  const int64_t g = static_cast<uint32_t>(block) / static_cast<uint32_t>(a.blocks_per_group);
  uint32_t words[kGemvRowsPerCta][kUnitWords<Bits>];
  float scale[kGemvRowsPerCta], zero_scale[kGemvRowsPerCta];
  RQAT_UNROLL
  for (int i = 0; i < kGemvRowsPerCta; ++i) {
    const int64_t o = o0 + i;
    for (int k = 0; k < kUnitWords<Bits>; ++k) words[i][k] = 0;
    scale[i] = zero_scale[i] = 0.f;  // rows past the end add 0
    if (o >= a.out) continue;
    load_unit_words<Bits>(a.codes + o * a.words_per_row + block * Bits, static_cast<int>(unit & 1),
                          words[i]);
    scale[i] = a.scales[o * a.groups + g];
    zero_scale[i] = a.zeros[o * a.groups + g] * scale[i];
  }
  accumulate_unit_words<Bits, Rows, kGemvRowsPerCta, In>(a, c, words, scale, zero_scale, acc);
}

// Thread `thread` of CTA `cta`: its partial sums over the units it takes.
template <int Bits, int Rows, typename In>
RQAT_LANE void thread_partial_sums(const LowBitGemvArgs& a, int64_t cta, int thread,
                                   float (&acc)[kGemvRowsPerCta][Rows]) {
  RQAT_UNROLL
  for (int i = 0; i < kGemvRowsPerCta; ++i) {
    RQAT_UNROLL
    for (int r = 0; r < Rows; ++r) acc[i][r] = 0.f;
  }
  const int64_t units = a.units_per_row();
  const int threads = a.threads();
  for (int64_t unit = thread; unit < units; unit += threads)
    accumulate_unit<Bits, Rows, In>(a, cta * kGemvRowsPerCta, unit, acc);
}

// y[r, o] of a CTA's finished sum.
template <typename In>
RQAT_LANE void store_output(const LowBitGemvArgs& a, int64_t o, int64_t r, float v) {
  store_value(static_cast<In*>(a.y) + r * a.out + o, v);
}

// visitor.template run<Bits, Rows, In>() for x's dtype (both GEMVs' dispatch).
template <typename Visitor, typename BitsConstant, typename RowsConstant>
int visit_input_type(const LowBitGemvArgs& a, Visitor&& visitor, BitsConstant, RowsConstant) {
  constexpr int kBits = BitsConstant::value, kRows = RowsConstant::value;
  return a.x_bf16 ? visitor.template run<kBits, kRows, Bf16>()
                  : visitor.template run<kBits, kRows, float>();
}

// f(std::integral_constant<int, bits>{}) for bits 2, 3, 4 or 8; `invalid` for any other.
template <typename F>
int visit_bits(int bits, F&& f, int invalid) {
  switch (bits) {
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    default:
      return invalid;
  }
}

// The template arguments of a call: rows of x rounded up to 1, 2, 4, 8 or 16 (a.rows checks the
// rest), bits and dtype. Calls visitor.template run<Bits, Rows, In>() and returns what it returns;
// `invalid` for bits or rows out of range.
template <typename Visitor>
int visit_low_bit_gemv(const LowBitGemvArgs& a, Visitor&& visitor, int invalid) {
  return visit_bits(
      a.bits,
      [&](auto bits) {
        if (a.rows < 1 || a.rows > kLowBitGemvMaxRows) return invalid;
        if (a.rows == 1)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 1>{});
        if (a.rows == 2)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 2>{});
        if (a.rows <= 4)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 4>{});
        if (a.rows <= 8)
          return visit_input_type(a, visitor, bits, std::integral_constant<int, 8>{});
        return visit_input_type(a, visitor, bits, std::integral_constant<int, 16>{});
      },
      invalid);
}

}  // namespace rqat::cuda
