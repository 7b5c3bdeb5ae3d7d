// The baseline target's packed 2-4-bit kernel (ops/low_bit_matmul_narrow_kernel.h) against a plain
// reference, with no LibTorch and no Catch2, so that the same file builds for another architecture
// with a cross compiler and runs under emulation (tests/cross_arch/run.sh: aarch64, whose 4-lane
// vectors are NEON registers; natively it checks the SSE2 build the same way).
//
// The codes are packed here from ops/low_bit_weight.h's layout description, not by the library's
// packer, and the reference is W[o, k] = (code - zero) * scale (two float32 operations, as the
// library's reference), summed in double. Checked, on every bit width, output counts that are not
// a multiple of anything, 1-3 groups of 1-4 blocks, 1-17 rows of x (every tile size 1-8 and more):
//   float activations: within 1e-5 of sum |x| (|code| + |zero|) |scale|, float32 rounding of the
//     kernel's scale * (sum code x - zero * sum x), whose two terms cancel where a weight is near
//     0 (row 0 has every code at its largest: with an integer zero there, whole groups are 0);
//     a one-hot x reads the reference's weight bit for bit (the kernel's stated contract);
//   int8 activations: within 1e-5 of sum |d q| (|code| + |zero|) |scale|;
//   the dequantized rows bit for bit;
//   rows outside [begin, end) untouched; a bad bit width or a missing input is an error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/error.h"
#include "ops/low_bit_decode_order.h"
#include "ops/low_bit_matmul_narrow_kernel.h"

namespace {

using rqat::ops::LowBitKernelArgs;

int failures = 0, checks = 0;
double worst_float = 0, worst_int8 = 0;  // over every shape, for the summary line

// The larger error; a NaN (an output never written, or a bad value) counts as infinite, where
// std::max would drop it.
double worse(double worst, double error) {
  return std::isnan(error) ? std::numeric_limits<double>::infinity() : std::max(worst, error);
}

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok && ++failures <= 20) std::printf("FAILED: %s\n", what.c_str());
}

struct Shape {
  int bits;
  int64_t out, groups, blocks_per_group, batch;
  std::string name() const {
    return fmt::format("W{} out {}, {} groups of {} blocks, {} rows", bits, out, groups,
                       blocks_per_group, batch);
  }
};

// One block's 32 codes into `bits` words, from ops/low_bit_weight.h's description:
//   2 bits: code k at bits [2k, 2k + 2) of the block's little-endian bit stream;
//   4 bits: code 16h + j in word 2h + j % 2, field j / 2;
//   3 bits: the low two bits of codes 0-15 in word 0 and of 16-31 in word 1, the third bit of
//           code k at bit k of word 2.
void pack_block(int bits, const int* codes, uint32_t* words) {
  for (int w = 0; w < bits; ++w) words[w] = 0;
  for (int k = 0; k < 32; ++k) {
    const auto c = static_cast<uint32_t>(codes[k]);
    if (bits == 2) {
      words[k / 16] |= c << (2 * (k % 16));
    } else if (bits == 4) {
      const int h = k / 16, j = k % 16;
      words[2 * h + j % 2] |= c << (4 * (j / 2));
    } else {
      words[k / 16] |= (c & 3u) << (2 * (k % 16));
      words[2] |= (c >> 2) << k;
    }
  }
}

struct Weight {
  Shape s;
  int64_t width = 0, words_per_row = 0;
  std::vector<int> codes;            // (out, width)
  std::vector<uint32_t> words;       // (out, words_per_row)
  std::vector<float> scales, zeros;  // (out, groups)
  std::vector<float> w;              // (out, width): the reference's (code - zero) * scale
  std::vector<float> operand;  // (out, width): (|code| + |zero|) * |scale|, the kernel's terms

  Weight(const Shape& shape, std::mt19937& rng) : s(shape) {
    width = s.groups * s.blocks_per_group * 32;
    words_per_row = s.groups * s.blocks_per_group * s.bits;
    std::uniform_int_distribution<int> code(0, (1 << s.bits) - 1);
    std::uniform_real_distribution<float> scale(-0.1f, 0.1f), fraction(0.0f, 1.0f);
    codes.resize(s.out * width);
    for (int& c : codes) c = code(rng);
    // Every code at its largest in row 0: the top field of each word, where a signed conversion
    // of an unshifted word would go wrong.
    for (int64_t k = 0; k < width; ++k) codes[k] = (1 << s.bits) - 1;
    words.resize(s.out * words_per_row);
    for (int64_t o = 0; o < s.out; ++o)
      for (int64_t b = 0; b < width / 32; ++b)
        pack_block(s.bits, &codes[o * width + 32 * b], &words[o * words_per_row + s.bits * b]);
    scales.resize(s.out * s.groups);
    zeros.resize(s.out * s.groups);
    for (int64_t i = 0; i < s.out * s.groups; ++i) {
      scales[i] = scale(rng);
      // Integer zeros (GPTQ's) on even rows, fractional ones (RTN/AWQ with float zeros) on odd.
      zeros[i] = float(code(rng)) + ((i / s.groups) % 2 ? fraction(rng) : 0.0f);
    }
    w.resize(s.out * width);
    operand.resize(s.out * width);
    for (int64_t o = 0; o < s.out; ++o)
      for (int64_t k = 0; k < width; ++k) {
        const int64_t g = o * s.groups + k / (32 * s.blocks_per_group), i = o * width + k;
        w[i] = (float(codes[i]) - zeros[g]) * scales[g];
        operand[i] = (float(codes[i]) + std::fabs(zeros[g])) * std::fabs(scales[g]);
      }
  }

  LowBitKernelArgs args() const {
    LowBitKernelArgs a;
    a.codes = words.data();
    a.scales = scales.data();
    a.zeros = zeros.data();
    a.out = s.out;
    a.groups = s.groups;
    a.blocks_per_group = s.blocks_per_group;
    a.words_per_row = words_per_row;
    a.bits = s.bits;
    a.x_stride = width;
    return a;
  }
};

// x (batch, width) in the kernels' decode order (the library's low_bit_x_in_decode_order, itself
// checked by the one-hot case: a wrong order reads the wrong code).
std::vector<float> in_decode_order(const Weight& wt, const std::vector<float>& x, int64_t batch) {
  LowBitKernelArgs a = wt.args();
  a.x = x.data();
  a.batch = batch;
  std::vector<float> out(x.size());
  rqat::ops::low_bit_x_in_decode_order(a, out.data());
  return out;
}

// Runs the float or int8 kernel over [0, out) in two calls, as two tasks would, and checks that a
// call over [1, out) leaves row 0 alone.
template <class Kernel>
std::vector<float> run_rows(const LowBitKernelArgs& base, Kernel kernel, const std::string& name) {
  LowBitKernelArgs a = base;
  std::vector<float> y(a.batch * a.out, std::numeric_limits<float>::quiet_NaN());
  a.y = y.data();
  if (a.out > 1) {
    kernel(a, 1, a.out);
    bool untouched = true;
    for (int64_t r = 0; r < a.batch; ++r) untouched = untouched && std::isnan(y[r * a.out]);
    check(untouched, name + ": a call over rows [1, out) wrote row 0");
  }
  const int64_t middle = a.out / 2;
  kernel(a, 0, middle);
  kernel(a, middle, a.out);
  return y;
}

// The worst |y - want| / sum_k |a_k| (|code| + |zero|) |scale| over every output, where
// want = sum_k a_k w_k in double and a_k = activation(r, k), the value the kernel multiplies with
// column k of row r (float: x; int8: d_b q).
template <class Activation>
double worst_error(const Weight& wt, const std::vector<float>& y, Activation activation) {
  double worst = 0;
  for (int64_t r = 0; r < wt.s.batch; ++r)
    for (int64_t o = 0; o < wt.s.out; ++o) {
      double want = 0, magnitude = 0;
      for (int64_t k = 0; k < wt.width; ++k) {
        const double a = activation(r, k);
        want += a * wt.w[o * wt.width + k];
        magnitude += std::fabs(a) * wt.operand[o * wt.width + k];
      }
      worst = worse(worst, std::fabs(y[r * wt.s.out + o] - want) / std::max(magnitude, 1e-30));
    }
  return worst;
}

void check_float(const Weight& wt, std::mt19937& rng) {
  const Shape& s = wt.s;
  std::normal_distribution<float> normal;
  std::vector<float> x(s.batch * wt.width), xsum(s.batch * s.groups, 0.0f);
  for (float& v : x) v = normal(rng);
  for (int64_t r = 0; r < s.batch; ++r)
    for (int64_t k = 0; k < wt.width; ++k)
      xsum[r * s.groups + k / (32 * s.blocks_per_group)] += x[r * wt.width + k];
  const std::vector<float> ordered = in_decode_order(wt, x, s.batch);
  LowBitKernelArgs a = wt.args();
  a.x = x.data();
  a.xsum = xsum.data();
  a.batch = s.batch;
  a.x_decode_order = ordered.data();
  const std::vector<float> y = run_rows(a, rqat::ops::low_bit_matmul_narrow_rows, s.name());
  const double worst =
      worst_error(wt, y, [&](int64_t r, int64_t k) { return double(x[r * wt.width + k]); });
  worst_float = std::max(worst_float, worst);
  check(worst < 1e-5, s.name() + ", float: worst error " + std::to_string(worst) +
                          " of sum |x| (|code| + |zero|) |scale| (bound 1e-5)");
}

// A one-hot x (one row) reads column k of W: the reference's weight, bit for bit, for every k.
void check_one_hot(const Weight& wt) {
  const Shape& s = wt.s;
  int wrong = 0;
  for (int64_t k = 0; k < wt.width; ++k) {
    std::vector<float> x(wt.width, 0.0f), xsum(s.groups, 0.0f);
    x[k] = 1.0f;
    xsum[k / (32 * s.blocks_per_group)] = 1.0f;
    const std::vector<float> ordered = in_decode_order(wt, x, 1);
    LowBitKernelArgs a = wt.args();
    a.x = x.data();
    a.xsum = xsum.data();
    a.batch = 1;
    a.x_decode_order = ordered.data();
    const std::vector<float> y = run_rows(a, rqat::ops::low_bit_matmul_narrow_rows, s.name());
    for (int64_t o = 0; o < s.out; ++o) wrong += y[o] != wt.w[o * wt.width + k];
  }
  check(wrong == 0, s.name() + ", one-hot x: " + std::to_string(wrong) +
                        " outputs differ from (code - zero) * scale");
}

void check_int8(const Weight& wt, std::mt19937& rng) {
  const Shape& s = wt.s;
  const int64_t blocks = wt.width / 32;
  std::uniform_int_distribution<int> q_dist(-127, 127);
  std::uniform_real_distribution<float> d_dist(1e-3f, 2e-2f);
  std::vector<float> q(s.batch * wt.width), d(s.batch * blocks), xsum(s.batch * s.groups, 0.0f);
  for (float& v : q) v = float(q_dist(rng));
  for (float& v : d) v = d_dist(rng);
  for (int64_t r = 0; r < s.batch; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      float sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[r * wt.width + 32 * b + j];
      xsum[r * s.groups + b / s.blocks_per_group] += d[r * blocks + b] * sum;
    }
  const std::vector<float> ordered = in_decode_order(wt, q, s.batch);
  LowBitKernelArgs a = wt.args();
  a.xsum = xsum.data();
  a.batch = s.batch;
  a.x_decode_order = ordered.data();
  a.block_scales = d.data();
  const std::vector<float> y = run_rows(a, rqat::ops::low_bit_matmul_narrow_int8_rows, s.name());
  const double worst = worst_error(wt, y, [&](int64_t r, int64_t k) {
    return double(d[r * blocks + k / 32]) * q[r * wt.width + k];
  });
  worst_int8 = std::max(worst_int8, worst);
  check(worst < 1e-5, s.name() + ", int8: worst error " + std::to_string(worst) +
                          " of sum |d q| (|code| + |zero|) |scale| (bound 1e-5)");
}

void check_dequantize(const Weight& wt) {
  const Shape& s = wt.s;
  const int64_t begin = s.out > 1 ? 1 : 0;
  std::vector<float> out((s.out - begin) * wt.width);
  rqat::ops::low_bit_dequantize_narrow_rows(wt.args(), begin, s.out, out.data());
  const bool same =
      std::memcmp(out.data(), wt.w.data() + begin * wt.width, out.size() * sizeof(float)) == 0;
  check(same, s.name() + ": dequantized rows differ from (code - zero) * scale");
}

template <class Call>
void check_error(Call call, const std::string& expected, const std::string& what) {
  try {
    call();
    check(false, what + ": no error");
  } catch (const rqat::Error& e) {
    check(std::string(e.what()).find(expected) != std::string::npos,
          what + ": error \"" + e.what() + "\" does not name " + expected);
  }
}

void check_errors(std::mt19937& rng) {
  const Weight wt({4, 3, 1, 1, 1}, rng);
  std::vector<float> y(3), x(32), d(1), xsum(1);
  LowBitKernelArgs a = wt.args();
  a.y = y.data();
  a.x = a.x_decode_order = x.data();
  a.xsum = xsum.data();
  a.batch = 1;
  LowBitKernelArgs five = a;
  five.bits = 5;
  check_error([&] { rqat::ops::low_bit_matmul_narrow_rows(five, 0, 3); }, "2, 3 or 4 bits",
              "5-bit float rows");
  check_error([&] { rqat::ops::low_bit_dequantize_narrow_rows(five, 0, 3, y.data()); },
              "2, 3 or 4 bits", "5-bit dequantize");
  LowBitKernelArgs no_order = a;
  no_order.x_decode_order = nullptr;
  check_error([&] { rqat::ops::low_bit_matmul_narrow_rows(no_order, 0, 3); }, "x_decode_order",
              "float rows without x in decode order");
  check_error([&] { rqat::ops::low_bit_matmul_narrow_int8_rows(a, 0, 3); }, "block_scales",
              "int8 rows without the blocks' scales");
}

}  // namespace

int main() {
  const char* arch =
#if defined(__aarch64__)
      "aarch64 (NEON)";
#elif defined(__x86_64__)
      "x86-64 (SSE2)";
#else
      "this architecture";
#endif
  constexpr uint32_t kSeed = 20261206;
  std::mt19937 rng(kSeed);
  int shapes = 0;
  for (int bits : {2, 3, 4})
    for (int64_t out : {1, 5, 17})
      for (auto [groups, blocks] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {2, 4}})
        for (int64_t batch : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
          const Weight wt({bits, out, groups, blocks, batch}, rng);
          check_float(wt, rng);
          check_int8(wt, rng);
          if (batch == 1) {
            check_one_hot(wt);
            check_dequantize(wt);
          }
          ++shapes;
        }
  check_errors(rng);
  if (failures > 0) {
    std::printf("%s: %d of %d checks failed (seed %u)\n", arch, failures, checks, kSeed);
    return 1;
  }
  std::printf(
      "%s: the narrow kernel passed %d checks on %d shapes (seed %u; worst relative error: float "
      "%.1e, int8 %.1e, bound 1e-5)\n",
      arch, checks, shapes, kSeed, worst_float, worst_int8);
  return 0;
}
