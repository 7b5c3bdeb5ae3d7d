// llama.cpp's weight formats (quant/gguf/blocks.h) on fresh random rows and awkward blocks: every
// type's quantize -> dequantize stays within its grid's error (half a step of the stored scale for
// the one-scale types, an RMS bound from llama.cpp's own quality for the K-quants), all-zero blocks
// come back as zeros, a block with one huge outlier keeps it, negative-only and tiny
// (fp16-denormal) values survive; the K-quants' packed 6-bit scales round-trip; bad shapes are
// one-line errors. The bit-for-bit agreement with llama.cpp's dequantizers is
// tests/python/test_gguf_export.py's.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#include "io/gguf_file.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/quantize.h"
#include "test_util.h"

using namespace rqat;
using io::GgufType;

namespace {

const GgufType kBlockTypes[] = {GgufType::kQ8_0, GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ2_K,
                                GgufType::kQ3_K, GgufType::kQ4_K, GgufType::kQ5_K, GgufType::kQ6_K};

at::Tensor round_trip(GgufType type, const at::Tensor& x) {
  const std::string bytes = quant::quantize_gguf_tensor(type, x);
  return quant::dequantize_gguf_tensor(type, bytes, x.sizes());
}

// RMS error relative to the RMS of Gaussian rows, at most: rqat measured 0.0054 (Q8_0), 0.086
// (Q4_0), 0.078 (Q4_1), 0.30 (Q2_K), 0.15 (Q3_K), 0.072 (Q4_K), 0.036 (Q5_K), 0.018 (Q6_K) on
// these rows (2026-12-03; the step sizes' uniform-error estimates agree); the bounds leave 25%.
double rms_bound(GgufType type) {
  switch (type) {
    case GgufType::kQ8_0:
      return 0.0068;
    case GgufType::kQ4_0:
      return 0.108;
    case GgufType::kQ4_1:
      return 0.098;
    case GgufType::kQ2_K:
      return 0.375;
    case GgufType::kQ3_K:
      return 0.19;
    case GgufType::kQ4_K:
      return 0.09;
    case GgufType::kQ5_K:
      return 0.045;
    case GgufType::kQ6_K:
      return 0.0225;
    default:
      return 0;
  }
}

}  // namespace

TEST_CASE("every GGUF block type round-trips Gaussian rows within its grid's error", "[gguf]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const auto x = at::randn({16, 512}, gen);
  for (const auto type : kBlockTypes) {
    INFO(enum_name(type));
    const auto y = round_trip(type, x);
    const double rel = ((y - x).pow(2).mean() / x.pow(2).mean()).sqrt().item<double>();
    std::cout << fmt::format("{}: relative RMS error {:.4f}\n", enum_name(type), rel);
    CHECK(rel < rms_bound(type));
    CHECK(rel > 0);
    CHECK(at::isfinite(y).all().item<bool>());
  }
}

TEST_CASE("GGUF one-scale blocks are within half a step of the stored scale", "[gguf]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  const auto x = at::randn({8, 64}, gen) * 3;
  for (const auto type : {GgufType::kQ8_0, GgufType::kQ4_0, GgufType::kQ4_1}) {
    INFO(enum_name(type));
    const std::string bytes = quant::quantize_gguf_tensor(type, x);
    const auto y = quant::dequantize_gguf_tensor(type, bytes, x.sizes());
    const auto info = io::gguf_type_info(type);
    for (int64_t b = 0; b < x.numel() / 32; ++b) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + b * info.block_bytes, 2);
      const float d = std::fabs(static_cast<float>(c10::Half(bits, c10::Half::from_bits())));
      const auto xb = x.view(-1).narrow(0, 32 * b, 32), yb = y.view(-1).narrow(0, 32 * b, 32);
      // Half a step, plus how far a value lies outside the block's grid (Q4_0's grid is -8d..7d:
      // the side opposite the largest magnitude ends a step short), plus the fp16 rounding of d
      // (codes are chosen with the unrounded scale: 2^-11 of the largest code, 127 or 15 steps).
      const auto outside = (xb - xb.clamp(yb.min().item<float>(), yb.max().item<float>())).abs();
      const double slack = (type == GgufType::kQ8_0 ? 127 : 15) * d * std::ldexp(1.0, -11);
      CHECK(((yb - xb).abs() - outside).max().item<double>() <= 0.5 * d + slack + 1e-7);
    }
  }
}

TEST_CASE("awkward GGUF blocks: zeros, one outlier, negative-only, tiny values", "[gguf]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (const auto type : kBlockTypes) {
    INFO(enum_name(type));
    const int64_t n = io::gguf_type_info(type).block_elements * 2;
    const auto zeros = at::zeros({1, n});
    CHECK(at::equal(round_trip(type, zeros), zeros));

    auto outlier = at::randn({1, n}, gen) * 0.01;
    outlier[0][3] = 50.0;
    const auto y = round_trip(type, outlier);
    // The outlier sets the block's scale, so it comes back within a few of its grid's steps.
    CHECK(std::abs(y[0][3].item<float>() - 50.0f) < 50.0f * 0.15f);

    const auto negative = -(at::rand({1, n}, gen) + 0.5);
    const auto yn = round_trip(type, negative);
    CHECK((yn <= 1e-6).all().item<bool>());
    CHECK(((yn - negative).abs().max() < 0.5).item<bool>());

    // Values whose scales fall below fp16's normal range (6e-5): finite, and no larger than the
    // input's magnitude.
    const auto tiny = at::randn({1, n}, gen) * 1e-7;
    const auto yt = round_trip(type, tiny);
    CHECK(at::isfinite(yt).all().item<bool>());
    CHECK((yt.abs().max() <= tiny.abs().max() * 2 + 1e-12).item<bool>());
  }
}

TEST_CASE("K-quant 6-bit scales and mins pack and unpack every value", "[gguf]") {
  for (int scale = 0; scale < 64; scale += 7) {
    for (int min = 0; min < 64; min += 5) {
      uint8_t packed[12] = {};
      for (int j = 0; j < 8; ++j)
        quant::pack_k_scale_min(packed, j, (scale + j) % 64, (min + 3 * j) % 64);
      for (int j = 0; j < 8; ++j) {
        int s = -1, m = -1;
        quant::unpack_k_scale_min(packed, j, s, m);
        CHECK(s == (scale + j) % 64);
        CHECK(m == (min + 3 * j) % 64);
      }
    }
  }
}

TEST_CASE("GGUF blocks refuse rows that are not whole blocks", "[gguf]") {
  test::require_error(
      [] {
        quant::quantize_gguf_tensor(GgufType::kQ4_K, at::zeros({2, 100}));
      },
      {"q4_k", "100", "256"});
  test::require_error(
      [] {
        quant::quantize_gguf_tensor(GgufType::kQ8_0, at::zeros({2, 33}));
      },
      {"q8_0", "33", "32"});
  CHECK(quant::gguf_row_fits(GgufType::kQ6_K, 512));
  CHECK_FALSE(quant::gguf_row_fits(GgufType::kQ6_K, 64));
  CHECK(quant::gguf_row_fits(GgufType::kF16, 7));
}
