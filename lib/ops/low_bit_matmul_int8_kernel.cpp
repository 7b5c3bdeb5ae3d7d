// See low_bit_matmul_int8_kernel.h. One block of 32 codes is one 256-bit register of 32 bytes,
// each byte a code in its low bits, unpacked from the block's words with whole-register shifts
// and masks (no per-code work):
//   4 bits  the 16 bytes of the block: low nibbles give bytes 0-15 of the register, high nibbles
//           bytes 16-31;
//   2 bits  the block's 8 bytes broadcast to the four 64-bit lanes, lane q shifted right by 2q:
//           byte p of lane q then holds code 4p + q in its low 2 bits;
//   3 bits  the low 2 bits as 2 bits from words 0-1 (the same bit stream), the high bit of code
//           4p + q (bit 4p + q of word 2) selected by a byte shuffle and a compare with its mask.
// The register's byte order is then not the codes' order, so x is rounded to int8 once per call
// in that same order (kPositionCode), and vpmaddubsw (unsigned codes x signed x, pairs summed to
// 16 bits: at most 2 * 15 * 127, no saturation) + vpmaddwd (pairs to 32 bits) give the block's
// integer dot product in 8 lanes, which one FMA with scale * d_b adds to the row's float lanes.
#include "ops/low_bit_matmul_int8_kernel.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "io/error.h"
#include "ops/cpu_target.h"
#include "ops/low_bit_decode_order.h"
#include "ops/low_bit_matmul_narrow_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RQAT_INT8_AVX2 1
#define RQAT_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define RQAT_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma,f16c")))
#endif

namespace rqat::ops {
namespace {

constexpr int kBlock = 32;
constexpr int kMaxTile = 4;  // rows of x per pass over a weight row's codes

// The code (index within its block of 32) that register byte `pos` holds for `bits`, as the
// header's unpacking puts it (see low_bit_weight.h for the words' layout).
constexpr int position_code(int bits, int pos) {
  if (bits == 4) {
    const int byte = pos % 16, nibble = pos / 16;
    const int word = byte / 4, field = 2 * (byte % 4) + nibble;
    return 16 * (word / 2) + 2 * field + word % 2;  // field f of word 2h + parity
  }
  const int lane = pos / 8, byte = pos % 8;  // 2 and 3 bits: code 4 * byte + lane
  return 4 * byte + lane;
}

template <int Bits>
constexpr std::array<int, kBlock> kPositionCode = [] {
  std::array<int, kBlock> table{};
  for (int pos = 0; pos < kBlock; ++pos) table[pos] = position_code(Bits, pos);
  return table;
}();

const std::array<int, kBlock>& position_codes(int bits) {
  switch (bits) {
    case 2:
      return kPositionCode<2>;
    case 3:
      return kPositionCode<3>;
    default:
      return kPositionCode<4>;
  }
}

// q = round-half-even(x / d), in [-127, 127]; NaN (from a NaN or infinite x) gives 0, and the
// block's d, NaN or infinite too, carries it into y.
int8_t round_to_int8(float x, float d) {
  if (d == 0) return 0;
  float v = std::nearbyint(x / d);
  if (!(v == v)) return 0;
  return static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
}

// d_b of a block: max |x| / 127, NaN when the block holds a NaN or an infinity.
float block_scale(const float* x) {
  float amax = 0;
  bool finite = true;
  for (int j = 0; j < kBlock; ++j) {
    const float v = std::fabs(x[j]);
    finite = finite && v <= std::numeric_limits<float>::max();
    amax = std::max(amax, v);
  }
  return finite ? amax / 127 : std::numeric_limits<float>::quiet_NaN();
}

void check_weight(const at::Tensor& padded, const LowBitWeight& w, const char* what) {
  if (w.bits < 2 || w.bits > 4)
    fail("{}: {}-bit weights have no int8 kernel (2-4 bits)", what, w.bits);
  const int64_t width = w.groups() * w.blocks_per_group() * kBlock;
  if (padded.dim() != 2 || padded.scalar_type() != at::kFloat || padded.size(1) != width ||
      !padded.device().is_cpu())
    fail("{}: x must be float32 (rows, {}) on the CPU", what, width);
}

// The float kernel's arguments (ops/low_bit_matmul_kernel.h): the weight, y, xsum holding each
// group's sum_b d_b sum_j q_j and block_scales each block's d_b; then q itself.
struct KernelArgs : LowBitKernelArgs {
  const int8_t* xq = nullptr;            // (batch, x_stride), in kPositionCode order
  const int32_t* block_group = nullptr;  // (x_stride / 32): the group of each block
};

// Without AVX2 (and when asked for the portable path): the baseline's 4-lane kernel
// (ops/low_bit_matmul_narrow_kernel.h) on q as floats in its decode order, made once here from
// the register order of kPositionCode (integers times powers of two: exact).
void rows_narrow(const KernelArgs& a, int64_t grain) {
  const auto& codes_at = position_codes(a.bits);
  int position_of[kBlock];
  for (int pos = 0; pos < kBlock; ++pos) position_of[codes_at[pos]] = pos;
  DecodeSlot slots[kBlock];
  for (int i = 0; i < kBlock; ++i) slots[i] = decode_slot(a.bits, i);
  std::vector<float> q(a.batch * a.x_stride);
  for (int64_t b = 0; b < a.batch * a.x_stride / kBlock; ++b)
    for (int i = 0; i < kBlock; ++i)
      q[b * kBlock + i] = a.xq[b * kBlock + position_of[slots[i].code]] * slots[i].factor;
  LowBitKernelArgs n = a;
  n.x_decode_order = q.data();
  at::parallel_for(0, a.out, grain, [&](int64_t begin, int64_t end) {
    low_bit_matmul_narrow_int8_rows(n, begin, end);
  });
}

#ifdef RQAT_INT8_AVX2
template <int Bits>
RQAT_AVX2_INLINE __m256i block_codes(const uint32_t* w) {
  if constexpr (Bits == 4) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, nibble);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1);
  } else {
    int64_t stream;
    std::memcpy(&stream, w, sizeof stream);
    const __m256i lanes =
        _mm256_srlv_epi64(_mm256_set1_epi64x(stream), _mm256_setr_epi64x(0, 2, 4, 6));
    const __m256i low = _mm256_and_si256(lanes, _mm256_set1_epi8(3));
    if constexpr (Bits == 2) return low;
    // Byte p of lane q needs bit 4p + q of word 2: bit 4(p & 1) + q of its byte p >> 1.
    const __m256i pick = _mm256_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3,  //
                                          0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
    const __m256i mask =
        _mm256_setr_epi8(1, 16, 1, 16, 1, 16, 1, 16, 2, 32, 2, 32, 2, 32, 2, 32, 4, 64, 4, 64, 4,
                         64, 4, 64, 8, -128, 8, -128, 8, -128, 8, -128);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(w[2])), pick);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
    return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)));
  }
}

RQAT_AVX2_INLINE __m256 block_dot(__m256i codes, const int8_t* xq) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i pairs = _mm256_maddubs_epi16(codes, x);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

RQAT_AVX2_INLINE float lanes_sum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// A row's scales or zeros: float32, or their exact float16 copies (fewer bytes to read).
template <bool Half>
struct GroupValues {
  const float* f32;
  const uint16_t* f16;
  RQAT_AVX2_INLINE float at(int64_t g) const { return Half ? _cvtsh_ss(f16[g]) : f32[g]; }
  RQAT_AVX2_INLINE __m256 eight(int64_t g) const {
    if constexpr (Half)
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f16 + g)));
    else
      return _mm256_loadu_ps(f32 + g);
  }
};

// scale * d_b for the 8 blocks b0 .. b0 + 7 of one row of x. Their groups are at most 8
// consecutive ones from block_group[b0]: those 8 scales loaded at once (float16 or float32), then
// one lane permute gives each block its group's (groups of 32: the identity); near the row's end
// the 8 are its last 8. A row of fewer than 8 groups gathers its float32 ones.
template <bool Half>
RQAT_AVX2_INLINE __m256 eight_block_scales(const KernelArgs& a, const GroupValues<Half>& scales,
                                           int64_t b0, const float* xd) {
  const __m256 d = _mm256_loadu_ps(xd + b0);
  if (a.blocks_per_group == 1) return _mm256_mul_ps(scales.eight(b0), d);
  const __m256i groups = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.block_group + b0));
  if (a.groups < 8) return _mm256_mul_ps(_mm256_i32gather_ps(scales.f32, groups, 4), d);
  const int32_t first = std::min<int32_t>(a.block_group[b0], static_cast<int32_t>(a.groups - 8));
  const __m256i lanes = _mm256_sub_epi32(groups, _mm256_set1_epi32(first));
  return _mm256_mul_ps(_mm256_permutevar8x32_ps(scales.eight(first), lanes), d);
}

// Output rows [begin, end) for rows [r0, r0 + Rows) of x. Per 8 blocks, the factors scale * d_b
// of every row are made in one vector multiply (the scalar loads, conversions and multiplies of
// one block at a time cost as many instructions as its dot product) and each block broadcasts
// its own from memory. Blocks go two at a time into two sets of float accumulators, so
// consecutive FMAs of a row do not wait on each other. The zero terms are one short dot product
// per row at its end.
template <int Bits, int Rows, bool Half>
RQAT_AVX2_INLINE void rows_tile(const KernelArgs& a, int64_t begin, int64_t end, int64_t r0) {
  const int64_t blocks = a.x_stride / kBlock, row_stride = a.x_stride;
  const int8_t* xq = a.xq + r0 * row_stride;
  const float* xd = a.block_scales + r0 * blocks;
  alignas(32) float factors[Rows][8];
  for (int64_t o = begin; o < end; ++o) {
    const uint32_t* codes = a.codes + o * a.words_per_row;
    const GroupValues<Half> scales{a.scales + o * a.groups,
                                   Half ? a.scales16 + o * a.groups : nullptr};
    __m256 acc0[Rows], acc1[Rows];
    for (int r = 0; r < Rows; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
      const int n = static_cast<int>(std::min<int64_t>(8, blocks - b0));
      for (int r = 0; r < Rows; ++r) {
        if (n == 8) {
          _mm256_store_ps(factors[r], eight_block_scales(a, scales, b0, xd + r * blocks));
        } else {
          for (int k = 0; k < n; ++k)
            factors[r][k] = scales.at(a.block_group[b0 + k]) * xd[r * blocks + b0 + k];
        }
      }
      int k = 0;
      for (; k + 2 <= n; k += 2) {
        const int64_t b = b0 + k;
        prefetch_codes_ahead(codes + b * Bits);
        const __m256i c0 = block_codes<Bits>(codes + b * Bits);
        const __m256i c1 = block_codes<Bits>(codes + (b + 1) * Bits);
        for (int r = 0; r < Rows; ++r) {
          const int8_t* xr = xq + r * row_stride + b * kBlock;
          acc0[r] =
              _mm256_fmadd_ps(block_dot(c0, xr), _mm256_broadcast_ss(&factors[r][k]), acc0[r]);
          acc1[r] = _mm256_fmadd_ps(block_dot(c1, xr + kBlock),
                                    _mm256_broadcast_ss(&factors[r][k + 1]), acc1[r]);
        }
      }
      if (k < n) {
        const int64_t b = b0 + k;
        const __m256i c0 = block_codes<Bits>(codes + b * Bits);
        for (int r = 0; r < Rows; ++r)
          acc0[r] = _mm256_fmadd_ps(block_dot(c0, xq + r * row_stride + b * kBlock),
                                    _mm256_broadcast_ss(&factors[r][k]), acc0[r]);
      }
    }
    const GroupValues<Half> zeros{a.zeros + o * a.groups,
                                  Half ? a.zeros16 + o * a.groups : nullptr};
    // A symmetric weight's one zero is read once (the same values, the same operations).
    const float shared_zero = a.zeros_shared ? a.zeros[0] : 0.0f;
    for (int r = 0; r < Rows; ++r) {
      const float* xsum = a.xsum + (r0 + r) * a.groups;
      __m256 zero_lanes = _mm256_setzero_ps();
      int64_t g = 0;
      for (; g + 8 <= a.groups; g += 8) {
        const __m256 zero = a.zeros_shared ? _mm256_set1_ps(shared_zero) : zeros.eight(g);
        zero_lanes = _mm256_fmadd_ps(_mm256_mul_ps(scales.eight(g), zero),
                                     _mm256_loadu_ps(xsum + g), zero_lanes);
      }
      float zero_term = lanes_sum(zero_lanes);
      for (; g < a.groups; ++g) {  // one explicit fma: the same rounding whichever zero is read
        const float zero = a.zeros_shared ? shared_zero : zeros.at(g);
        zero_term = std::fma(scales.at(g) * zero, xsum[g], zero_term);
      }
      a.y[(r0 + r) * a.out + o] = lanes_sum(_mm256_add_ps(acc0[r], acc1[r])) - zero_term;
    }
  }
}

template <int Bits, bool Half>
RQAT_AVX2_FN void rows_avx2(const KernelArgs& a, int64_t begin, int64_t end) {
  int64_t r0 = 0;
  for (; r0 + kMaxTile <= a.batch; r0 += kMaxTile)
    rows_tile<Bits, kMaxTile, Half>(a, begin, end, r0);
  switch (a.batch - r0) {
    case 3:
      return rows_tile<Bits, 3, Half>(a, begin, end, r0);
    case 2:
      return rows_tile<Bits, 2, Half>(a, begin, end, r0);
    case 1:
      return rows_tile<Bits, 1, Half>(a, begin, end, r0);
    default:
      return;
  }
}

template <int Bits>
void rows_avx2(const KernelArgs& a, int64_t begin, int64_t end) {
  return a.scales16 ? rows_avx2<Bits, true>(a, begin, end) : rows_avx2<Bits, false>(a, begin, end);
}

#endif

#ifdef RQAT_INT8_AVX2
void run_avx2_rows(const KernelArgs& a, int64_t begin, int64_t end) {
  switch (a.bits) {
    case 2:
      return rows_avx2<2>(a, begin, end);
    case 3:
      return rows_avx2<3>(a, begin, end);
    default:
      return rows_avx2<4>(a, begin, end);
  }
}

#endif

}  // namespace

Int8Activations quantize_activations_int8(const at::Tensor& padded, const LowBitWeight& w) {
  check_weight(padded, w, "quantize_activations_int8");
  const at::Tensor x = padded.contiguous();
  const int64_t rows = x.size(0), blocks = x.size(1) / kBlock, groups = w.groups();
  Int8Activations out;
  out.values = at::empty({rows, blocks * kBlock}, at::kChar);
  out.scales = at::empty({rows, blocks}, at::kFloat);
  out.group_sums = at::zeros({rows, groups}, at::kFloat);
  const auto& codes_at = position_codes(w.bits);
  const float* xp = x.data_ptr<float>();
  int8_t* qp = out.values.data_ptr<int8_t>();
  float* dp = out.scales.data_ptr<float>();
  float* sp = out.group_sums.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = xp + (r * blocks + b) * kBlock;
      int8_t* qb = qp + (r * blocks + b) * kBlock;
      const float d = block_scale(xb);
      int32_t sum = 0;
      for (int pos = 0; pos < kBlock; ++pos) {
        qb[pos] = round_to_int8(xb[codes_at[pos]], d);
        sum += qb[pos];
      }
      dp[r * blocks + b] = d;
      sp[r * groups + b / w.blocks_per_group()] += d * static_cast<float>(sum);
    }
  return out;
}

at::Tensor low_bit_matmul_int8(const at::Tensor& padded, const LowBitWeight& w,
                               bool use_half_scales, bool portable) {
  const Int8Activations xq = quantize_activations_int8(padded, w);
  const at::Tensor codes = w.codes.contiguous(), scales = w.scales.contiguous(),
                   zeros = w.zeros.contiguous();
  at::Tensor y = at::empty({padded.size(0), w.out_features}, at::kFloat);
  KernelArgs a{};
  a.xq = xq.values.data_ptr<int8_t>();
  a.block_scales = xq.scales.data_ptr<float>();
  a.xsum = xq.group_sums.data_ptr<float>();
  a.batch = padded.size(0);
  a.x_stride = padded.size(1);
  a.codes = reinterpret_cast<const uint32_t*>(codes.data_ptr<int32_t>());
  a.scales = scales.data_ptr<float>();
  a.zeros = zeros.data_ptr<float>();
  if (const LowBitHalfScales* half = use_half_scales ? exact_half_scales(w) : nullptr) {
    a.scales16 = reinterpret_cast<const uint16_t*>(half->scales.data_ptr<at::Half>());
    a.zeros16 = reinterpret_cast<const uint16_t*>(half->zeros.data_ptr<at::Half>());
  }
  a.zeros_shared = low_bit_zeros_shared(w);
  a.out = w.out_features;
  a.groups = w.groups();
  a.blocks_per_group = w.blocks_per_group();
  a.words_per_row = w.words_per_row();
  a.bits = w.bits;
  std::vector<int32_t> block_group(a.x_stride / kBlock);
  for (int64_t b = 0; b < a.x_stride / kBlock; ++b)
    block_group[b] = static_cast<int32_t>(b / a.blocks_per_group);
  a.block_group = block_group.data();
  a.y = y.data_ptr<float>();
  if (a.batch == 0) return y;
  // The AVX2 code wherever ops/cpu_target.h's target includes it (avx2 = x86-64-v3 has AVX2, FMA
  // and F16C; avx512 runs the same code), else the baseline's kernel.
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, a.out / 64));
#ifdef RQAT_INT8_AVX2
  if (!portable && cpu_target() >= CpuTarget::kAvx2) {
    at::parallel_for(0, a.out, grain,
                     [&](int64_t begin, int64_t end) { run_avx2_rows(a, begin, end); });
    return y;
  }
#endif
  rows_narrow(a, grain);
  return y;
}

// Each kernel column's place in `padded`: its group's padded run of blocks.
static at::Tensor padded_column_codes(const LowBitWeight& w) {
  const at::Tensor codes = unpack_low_bit_codes(w).cpu();  // (out, in), kernel order
  const int64_t width = w.blocks_per_group() * kBlock;
  at::Tensor out = at::zeros({w.out_features, w.groups() * width}, at::kInt);
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * w.group_size, length = std::min(w.group_size, w.in_features - first);
    out.narrow(1, g * width, length).copy_(codes.narrow(1, first, length));
  }
  return out;
}

// 1 where a padded column is a real column of the weight, 0 where it pads its group.
static at::Tensor padded_columns_mask(const LowBitWeight& w) {
  const int64_t width = w.blocks_per_group() * kBlock;
  at::Tensor mask = at::zeros({w.groups() * width}, at::kDouble);
  for (int64_t g = 0; g < w.groups(); ++g)
    mask.narrow(0, g * width, std::min(w.group_size, w.in_features - g * w.group_size)).fill_(1);
  return mask;
}

at::Tensor low_bit_matmul_int8_reference(const at::Tensor& padded, const LowBitWeight& w) {
  check_weight(padded, w, "low_bit_matmul_int8_reference");
  const at::Tensor x = padded.contiguous(), codes = padded_column_codes(w);
  const at::Tensor scales = w.scales.cpu().contiguous(), zeros = w.zeros.cpu().contiguous();
  const int64_t rows = x.size(0), blocks = x.size(1) / kBlock, bpg = w.blocks_per_group();
  const auto xa = x.accessor<float, 2>();
  const auto ca = codes.accessor<int32_t, 2>();
  const auto sa = scales.accessor<float, 2>(), za = zeros.accessor<float, 2>();
  at::Tensor y = at::empty({rows, w.out_features}, at::kFloat);
  auto ya = y.accessor<float, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> q(blocks * kBlock);  // this row's x in code order
    std::vector<double> d(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      d[b] = block_scale(&xa[r][b * kBlock]);
      for (int j = 0; j < kBlock; ++j)
        q[b * kBlock + j] = round_to_int8(xa[r][b * kBlock + j], static_cast<float>(d[b]));
    }
    for (int64_t o = 0; o < w.out_features; ++o) {
      double total = 0;
      for (int64_t g = 0; g < w.groups(); ++g) {
        double dot = 0, qsum = 0;
        for (int64_t b = g * bpg; b < (g + 1) * bpg; ++b) {
          int64_t block_dot = 0, block_sum = 0;
          for (int j = 0; j < kBlock; ++j) {
            block_dot += int64_t{ca[o][b * kBlock + j]} * q[b * kBlock + j];
            block_sum += q[b * kBlock + j];
          }
          dot += d[b] * static_cast<double>(block_dot);
          qsum += d[b] * static_cast<double>(block_sum);
        }
        total += double{sa[o][g]} * (dot - double{za[o][g]} * qsum);
      }
      ya[r][o] = static_cast<float>(total);
    }
  }
  return y;
}

at::Tensor low_bit_int8_error_bound(const at::Tensor& padded, const LowBitWeight& w) {
  check_weight(padded, w, "low_bit_int8_error_bound");
  const int64_t rows = padded.size(0), blocks = padded.size(1) / kBlock;
  const int64_t bpg = w.blocks_per_group();
  // |w| per padded column (padding columns masked out), summed per block.
  const at::Tensor group = at::arange(blocks, at::kLong).div(bpg, "floor");
  const at::Tensor codes =
      padded_column_codes(w).to(at::kDouble).view({w.out_features, blocks, kBlock});
  const at::Tensor zeros = w.zeros.cpu().to(at::kDouble).index_select(1, group).unsqueeze(2);
  const at::Tensor scales = w.scales.cpu().to(at::kDouble).index_select(1, group).unsqueeze(2);
  const at::Tensor real = padded_columns_mask(w).view({1, blocks, kBlock});
  const at::Tensor w_abs = ((codes - zeros) * scales * real).abs().sum(2);  // (out, blocks)
  const at::Tensor half_d =
      padded.to(at::kDouble).view({rows, blocks, kBlock}).abs().amax(2) / (2 * 127.0);
  return at::matmul(half_d, w_abs.t()).to(at::kFloat);
}

}  // namespace rqat::ops
