// See quantize.h; the block layouts are in blocks.cpp.
#include "quant/gguf/quantize.h"

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/error.h"

namespace rqat::quant {

namespace {

using io::GgufType;

// Below this a sub-block counts as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even (ggml's nearest_int, for |x| < 2^22 as there).
int nearest(float x) { return static_cast<int>(std::nearbyint(x)); }

void store_half(uint8_t* p, float x) {
  const uint16_t bits = c10::Half(x).x;
  std::memcpy(p, &bits, 2);
}
float stored_half(float x) { return static_cast<float>(c10::Half(x)); }
float half_value(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

// The signed value of largest magnitude (the first such one).
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

void quantize_q8_0(const float* x, uint8_t* y) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  store_half(y, d);
  for (int i = 0; i < 32; ++i)
    y[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
}

// Q4_0 and Q4_1 share the nibble packing: code i and i + 16 in byte i.
void pack_nibbles(const int* codes, uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(codes[i] | (codes[i + 16] << 4));
}

void quantize_q4_0(const float* x, uint8_t* y) {
  const float d = signed_absmax(x, 32) / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  store_half(y, d);
  int codes[32];
  // Truncation toward zero of x/d + 8.5 (ggml's (int8_t) cast), at most 15.
  for (int i = 0; i < 32; ++i)
    codes[i] = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
  pack_nibbles(codes, y + 2);
}

void quantize_q4_1(const float* x, uint8_t* y) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float d = (hi - lo) / 15;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  store_half(y, d);
  store_half(y + 2, lo);
  int codes[32];
  for (int i = 0; i < 32; ++i)
    codes[i] = std::min(15, static_cast<int>(static_cast<int8_t>((x[i] - lo) * id + 0.5f)));
  pack_nibbles(codes, y + 4);
}

// An affine fit x ~ scale * L + min (min <= 0) of n values on codes 0..nmax, minimizing the
// weighted error (squared, or absolute with use_mad): start from the min-max grid, then try nstep
// + 1 grids of (nmax + rmin + rdelta * k) steps from the best min so far to the max, each refit by
// weighted least squares. Returns the scale; *negated_min = -min; L the codes. (ggml's
// make_qkx2_quants.)
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* negated_min,
                 float rmin, float rdelta, int nstep, bool use_mad) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *negated_min = -lo;
    return 0.0f;
  }
  const auto error_of = [&](float scale, float min, const uint8_t* codes) {
    float error = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * codes[i] + min - x[i];
      diff = use_mad ? std::fabs(diff) : diff * diff;
      error += w[i] * diff;
    }
    return error;
  };
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale, min = lo;
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<uint8_t>(std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax));
  float best = error_of(scale, min, L);
  uint8_t trial[32];
  // Each grid spans the range from the min accepted so far (as ggml's search does).
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * step + nmax) / (hi - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float trial_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (trial_min > 0) {
      trial_min = 0;
      trial_scale = sum_xl / sum_l2;
    }
    const float error = error_of(trial_scale, trial_min, trial);
    if (error < best) {
      std::copy(trial, trial + n, L);
      best = error;
      scale = trial_scale;
      min = trial_min;
    }
  }
  *negated_min = -min;
  return scale;
}

// A symmetric fit x ~ scale * (L - nmax) on codes -nmax..nmax-1 from the value of largest
// magnitude, weighted by w (nullptr: x^2), tried at 19 grid sizes around nmax (ggml's
// make_qx_quants with rmse_type 1: Q6_K, and with an importance matrix Q3_K and Q4_0). Returns the
// scale; L holds codes + nmax.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L, const float* w = nullptr) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const auto weight = [&](int i) { return w != nullptr ? w[i] : x[i] * x[i]; };
  const auto fit = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      sumlx += weight(i) * x[i] * l;
      suml2 += weight(i) * l * l;
    }
  };
  const auto set_codes = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = -nmax / max, sumlx, suml2;
  fit(iscale, sumlx, suml2);
  set_codes(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(nmax + 0.1f * k) / max;
    fit(iscale, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      set_codes(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Non-negative values (sub-block scales or mins) on one scale: x ~ scale * L, L in 0..nmax,
// weighted by w: the best of 9 grid sizes around nmax, then up to 5 rounds of moving single
// codes where that raises the weighted fit (ggml's make_qp_quants, the K-quants' sub-block
// scales under an importance matrix). Returns the scale.
float fit_nonnegative(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max == 0) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  const auto weighted_error = [&](float iscale) {
    const float scale = 1 / iscale;
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = x[i] - scale * std::min(nmax, nearest(iscale * x[i]));
      error += w[i] * diff * diff;
    }
    return error;
  };
  float iscale = nmax / max;
  float best = weighted_error(iscale);
  for (int k = -4; k <= 4; ++k) {
    if (k == 0) continue;
    const float trial = (0.1f * k + nmax) / max;
    const float error = weighted_error(trial);
    if (error < best) {
      best = error;
      iscale = trial;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sumlx += w[i] * x[i] * l;
    suml2 += w[i] * l * l;
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      float slx = sumlx - w[i] * x[i] * L[i];
      float sl2 = suml2 - w[i] * L[i] * L[i];
      if (!(slx > 0 && sl2 > 0)) continue;
      const int l = std::min(nmax, nearest(x[i] * sl2 / slx));
      if (l == L[i]) continue;
      slx += w[i] * x[i] * l;
      sl2 += w[i] * l * l;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<uint8_t>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  return sumlx / suml2;
}

// Q4_0 and Q4_1 with an importance matrix (ggml's quantize_row_q4_0_impl / q4_1_impl): a value
// weighs qw * sqrt(sigma2 + x^2), sigma2 the whole row's mean square; Q4_0 takes the weighted
// symmetric fit, Q4_1 the weighted affine fit over fine grids.
void quantize_q4_0_weighted(const float* x, const float* qw, float sigma2, uint8_t* y) {
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
  int8_t L[32];
  store_half(y, fit_symmetric(32, 8, x, L, w));
  int codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = L[j];
  pack_nibbles(codes, y + 2);
}

void quantize_q4_1_weighted(const float* x, const float* qw, float sigma2, uint8_t* y) {
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
  uint8_t L[32];
  float negated_min = 0;
  store_half(y, fit_affine(32, 15, x, w, L, &negated_min, -0.9f, 0.05f, 36, false));
  store_half(y + 2, -negated_min);
  int codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = L[j];
  pack_nibbles(codes, y + 4);
}

// Q3_K's sub-block fit: codes -nmax..nmax-1 from the largest magnitude, then up to 5 rounds of
// moving single codes where that raises the x^2-weighted fit (ggml's make_q3_quants with rmse).
// Returns the scale; L holds codes + nmax.
float fit_q3(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx <= 0) continue;
      float sl2 = suml2 - w * L[i] * L[i];
      const int l = std::clamp(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * l;
      sl2 += w * l * l;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// Four 2-bit codes of each 128-value half per byte: byte 32h + l holds codes 128h + 32s + l in
// bits 2s (Q2_K and the low bits of Q3_K).
void pack_two_bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(c[0] | (c[32] << 2) | (c[64] << 4) | (c[96] << 6));
    }
}

// Q2_K's codes again on the stored scales (sub-blocks whose step is 0 keep the fit's codes),
// packed.
void finish_q2_k(const float* x, uint8_t* L, uint8_t* y) {
  const uint8_t* sc = y;
  const float d = half_value(y + 80), dmin = half_value(y + 82);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (sc[j] & 0x0F);
    if (dl == 0) continue;
    const float ml = dmin * (sc[j] >> 4);
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<uint8_t>(std::clamp(nearest((x[16 * j + l] + ml) / dl), 0, 3));
  }
  pack_two_bit(L, y + 16);
}

void quantize_q2_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = y;
  std::fill(sc, sc + 16, uint8_t{0});
  constexpr float kLevels = 15.f;
  if (max_scale > 0) {
    const float iscale = kLevels / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest(iscale * scales[j]));
  }
  store_half(y + 80, max_scale > 0 ? max_scale / kLevels : 0.0f);
  if (max_min > 0) {
    const float iscale = kLevels / max_min;
    for (int j = 0; j < 16; ++j) sc[j] |= static_cast<uint8_t>(nearest(iscale * mins[j]) << 4);
  }
  store_half(y + 82, max_min > 0 ? max_min / kLevels : 0.0f);
  finish_q2_k(x, L, y);
}

// The importance-weighted fits of the K-quants weight a value by qw * sqrt(sigma2 + x^2), sigma2
// the super-block's mean square times `spread` (2, or 1 for Q2_K).
void importance_weights(const float* x, const float* qw, int n, float sigma2, float* w) {
  for (int l = 0; l < n; ++l) w[l] = qw[l] * std::sqrt(sigma2 + x[l] * x[l]);
}
float super_block_sigma2(const float* x, float spread) {
  float sum_x2 = 0;
  for (int j = 0; j < 256; ++j) sum_x2 += x[j] * x[j];
  return spread * sum_x2 / 256;
}
float sum_of(const float* w, int n) {
  float s = 0;
  for (int l = 0; l < n; ++l) s += w[l];
  return s;
}

// With an importance matrix (ggml's quantize_row_q2_K_impl): each sub-block's affine fit over
// finer grids, then its scale and min quantized to 4 bits by fit_nonnegative, weighted by the
// sub-blocks' total weight.
void quantize_q2_k_weighted(const float* x, const float* qw, uint8_t* y) {
  uint8_t L[256], Ls[16], Lm[16];
  float scales[16], mins[16], sw[16], w[16];
  const float sigma2 = super_block_sigma2(x, 1.f);
  for (int j = 0; j < 16; ++j) {
    importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, w);
    sw[j] = sum_of(w, 16);
    scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
  }
  store_half(y + 80, fit_nonnegative(16, 15, scales, Ls, sw));
  store_half(y + 82, fit_nonnegative(16, 15, mins, Lm, sw));
  for (int j = 0; j < 16; ++j) y[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
  finish_q2_k(x, L, y);
}

// Q3_K's codes again on the stored scales, the high bit of code e into bit e / 32 of
// hmask[e % 32] and the low two bits packed as Q2_K's.
void finish_q3_k(const float* x, int8_t* L, uint8_t* y) {
  const uint8_t* sc = y + 96;
  const float d = half_value(y + 108);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * static_cast<float>(unpack_q3_k_scale(sc, j));
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest(x[16 * j + l] / dl), -4, 3) + 4);
  }
  uint8_t* hmask = y;
  std::fill(hmask, hmask + 32, uint8_t{0});
  uint8_t low[256];
  for (int e = 0; e < 256; ++e) {
    int l = L[e];
    if (l > 3) {
      hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      l -= 4;
    }
    low[e] = static_cast<uint8_t>(l);
  }
  pack_two_bit(low, y + 32);
}

void quantize_q3_k(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t* sc = y + 96;
  std::fill(sc, sc + 12, uint8_t{0});
  float d_value = 0;
  if (max_scale != 0) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j)
      pack_q3_k_scale(sc, j, std::clamp(nearest(iscale * scales[j]), -32, 31));
    d_value = 1 / iscale;
  }
  store_half(y + 108, d_value);
  finish_q3_k(x, L, y);
}

// With an importance matrix (ggml's quantize_row_q3_K_impl): weighted symmetric fits of the
// sub-blocks and of their scales (6 bits, weighted by the sub-blocks' total weight).
void quantize_q3_k_weighted(const float* x, const float* qw, uint8_t* y) {
  int8_t L[256], Ls[16];
  float scales[16], sw[16], w[16];
  const float sigma2 = super_block_sigma2(x, 2.f);
  for (int j = 0; j < 16; ++j) {
    importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, w);
    sw[j] = sum_of(w, 16);
    scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j, w);
  }
  uint8_t* sc = y + 96;
  std::fill(sc, sc + 12, uint8_t{0});
  const float d_block = fit_symmetric(16, 32, scales, Ls, sw);
  for (int j = 0; j < 16; ++j) pack_q3_k_scale(sc, j, Ls[j] - 32);
  store_half(y + 108, d_block);
  finish_q3_k(x, L, y);
}

// Q4_K and Q5_K (8 sub-blocks of 32 on codes 0..nmax, 15 or 31): the codes again on the stored
// scales and mins, then packed (Q5_K's fifth bits in qh).
void finish_q4_5_k(const float* x, uint8_t* L, uint8_t* y, bool five) {
  const int nmax = five ? 31 : 15;
  const uint8_t* packed = y + 4;
  const float d = half_value(y), dmin = half_value(y + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    unpack_k_scale_min(packed, j, sc, m);
    const float dl = d * sc;
    if (dl == 0) continue;
    const float ml = dmin * m;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest((x[32 * j + l] + ml) / dl), 0, nmax));
  }
  uint8_t* qh = y + 16;
  uint8_t* qs = y + (five ? 48 : 16);
  if (five) std::fill(qh, qh + 32, uint8_t{0});
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      int q = L[32 * j + l];
      if (five && q > 15) {
        qh[l] |= static_cast<uint8_t>(1 << j);
        q -= 16;
      }
      uint8_t& byte = qs[32 * (j / 2) + l];
      byte = static_cast<uint8_t>(j % 2 == 0 ? q : byte | (q << 4));
    }
}

void quantize_q4_5_k(const float* x, uint8_t* y, bool five) {
  const int nmax = five ? 31 : 15;
  uint8_t L[256];
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], five ? -0.5f : -1.f, 0.1f,
                           five ? 15 : 20, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* packed = y + 4;
  std::fill(packed, packed + 12, uint8_t{0});
  for (int j = 0; j < 8; ++j)
    pack_k_scale_min(packed, j, std::min(63, nearest(inv_scale * scales[j])),
                     std::min(63, nearest(inv_min * mins[j])));
  store_half(y, max_scale / 63.f);
  store_half(y + 2, max_min / 63.f);
  finish_q4_5_k(x, L, y, five);
}

// With an importance matrix (ggml's quantize_row_q4_K_impl / q5_K_impl): weighted affine fits
// over finer grids, then the scales and mins to 6 bits by fit_nonnegative.
void quantize_q4_5_k_weighted(const float* x, const float* qw, uint8_t* y, bool five) {
  const int nmax = five ? 31 : 15;
  uint8_t L[256], Ls[8], Lm[8];
  float scales[8], mins[8], sw[8], w[32];
  const float sigma2 = super_block_sigma2(x, 2.f);
  for (int j = 0; j < 8; ++j) {
    importance_weights(x + 32 * j, qw + 32 * j, 32, sigma2, w);
    sw[j] = sum_of(w, 32);
    scales[j] = fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
  }
  const float d_block = fit_nonnegative(8, 63, scales, Ls, sw);
  const float m_block = fit_nonnegative(8, 63, mins, Lm, sw);
  uint8_t* packed = y + 4;
  std::fill(packed, packed + 12, uint8_t{0});
  for (int j = 0; j < 8; ++j)
    pack_k_scale_min(packed, j, std::min<int>(63, Ls[j]), std::min<int>(63, Lm[j]));
  store_half(y, d_block);
  store_half(y + 2, m_block);
  finish_q4_5_k(x, L, y, five);
}

// qw: an importance matrix's weights, used as they are (ggml's quantize_row_q6_K_impl), or
// nullptr: x^2 (the reference quantizer).
void quantize_q6_k(const float* x, uint8_t* y, const float* qw = nullptr) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] =
        fit_symmetric(16, 32, x + 16 * j, L + 16 * j, qw != nullptr ? qw + 16 * j : nullptr);
    if (std::fabs(scales[j]) > max_abs) {
      max_abs = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::fill(y, y + 210, uint8_t{0});
  if (max_abs < kGroupMaxEps) return;  // every field 0, d = +0
  const float iscale = -128.f / max_scale;
  store_half(y + 208, 1 / iscale);
  auto* sc = reinterpret_cast<int8_t*>(y + 192);
  for (int j = 0; j < 16; ++j)
    sc[j] = static_cast<int8_t>(std::min(127, nearest(iscale * scales[j])));
  const float d = stored_half(1 / iscale);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * sc[j];
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest(x[16 * j + l] / dl), -32, 31) + 32);
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, q = L[e];
    ql[64 * h + r % 64] |= static_cast<uint8_t>((q & 0x0F) << (4 * (r / 64)));
    qh[32 * h + r % 32] |= static_cast<uint8_t>((q >> 4) << (2 * (r / 32)));
  }
}

}  // namespace

void unpack_k_scale_min(const uint8_t* packed, int j, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

int unpack_q3_k_scale(const uint8_t* packed, int j) {
  const int low4 = j < 8 ? (packed[j] & 0x0F) : (packed[j - 8] >> 4);
  const int high2 = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low4 | (high2 << 4)) - 32;
}

void pack_q3_k_scale(uint8_t* packed, int j, int scale) {
  const int stored = scale + 32;
  packed[j < 8 ? j : j - 8] |= static_cast<uint8_t>((stored & 0x0F) << (j < 8 ? 0 : 4));
  packed[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
}

void pack_k_scale_min(uint8_t* packed, int j, int scale, int min) {
  if (j < 4) {
    packed[j] |= static_cast<uint8_t>(scale);
    packed[j + 4] |= static_cast<uint8_t>(min);
  } else {
    packed[j + 4] |= static_cast<uint8_t>((scale & 0x0F) | ((min & 0x0F) << 4));
    packed[j - 4] |= static_cast<uint8_t>((scale >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((min >> 4) << 6);
  }
}

void quantize_gguf_block(io::GgufType type, const float* x, uint8_t* out) {
  switch (type) {
    case GgufType::kQ8_0:
      return quantize_q8_0(x, out);
    case GgufType::kQ4_0:
      return quantize_q4_0(x, out);
    case GgufType::kQ4_1:
      return quantize_q4_1(x, out);
    case GgufType::kQ2_K:
      return quantize_q2_k(x, out);
    case GgufType::kQ3_K:
      return quantize_q3_k(x, out);
    case GgufType::kQ4_K:
      return quantize_q4_5_k(x, out, false);
    case GgufType::kQ5_K:
      return quantize_q4_5_k(x, out, true);
    case GgufType::kQ6_K:
      return quantize_q6_k(x, out);
    case GgufType::kF32:
    case GgufType::kF16:
    case GgufType::kBF16:
    case GgufType::kCount:
      break;
  }
  fail("quantize_gguf_block: {} is not a block type", enum_name(type));
}

void quantize_gguf_row(io::GgufType type, const float* x, int64_t n, const float* importance,
                       uint8_t* out) {
  const auto info = io::gguf_type_info(type);
  if (info.block_elements <= 1 || n % info.block_elements != 0)
    fail("quantize_gguf_row: {} values are not a whole number of {} blocks", n, enum_name(type));
  const int64_t blocks = n / info.block_elements;
  // Q8_0 has no weighted search in llama.cpp: it ignores an importance matrix too.
  if (importance == nullptr || type == GgufType::kQ8_0) {
    for (int64_t k = 0; k < blocks; ++k)
      quantize_gguf_block(type, x + k * info.block_elements, out + k * info.block_bytes);
    return;
  }
  float row_sigma2 = 0;  // Q4_0 and Q4_1: the whole row's mean square
  if (type == GgufType::kQ4_0 || type == GgufType::kQ4_1) {
    for (int64_t j = 0; j < n; ++j) row_sigma2 += x[j] * x[j];
    row_sigma2 /= static_cast<float>(n);
  }
  for (int64_t k = 0; k < blocks; ++k) {
    const float* xb = x + k * info.block_elements;
    const float* qw = importance + k * info.block_elements;
    uint8_t* y = out + k * info.block_bytes;
    switch (type) {
      case GgufType::kQ4_0:
        quantize_q4_0_weighted(xb, qw, row_sigma2, y);
        break;
      case GgufType::kQ4_1:
        quantize_q4_1_weighted(xb, qw, row_sigma2, y);
        break;
      case GgufType::kQ2_K:
        quantize_q2_k_weighted(xb, qw, y);
        break;
      case GgufType::kQ3_K:
        quantize_q3_k_weighted(xb, qw, y);
        break;
      case GgufType::kQ4_K:
        quantize_q4_5_k_weighted(xb, qw, y, false);
        break;
      case GgufType::kQ5_K:
        quantize_q4_5_k_weighted(xb, qw, y, true);
        break;
      case GgufType::kQ6_K:
        quantize_q6_k(xb, y, qw);
        break;
      default:
        fail("quantize_gguf_row: {} is not a block type", enum_name(type));
    }
  }
}

}  // namespace rqat::quant
