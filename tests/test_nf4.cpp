// NF4 (quant/nf4.h): the level table against its construction (normal quantiles, as QLoRA builds
// it), quantization against a plain nearest-level loop on fresh random weights of awkward sizes,
// exact dequantization, bitsandbytes' nibble order, and errors.
#include "catch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "quant/nf4.h"
#include "quant/nf4_linear.h"
#include "test_util.h"

using rqat::quant::kNf4Levels;
using rqat::quant::nf4_codes;
using rqat::quant::nf4_dequantize;
using rqat::quant::nf4_quantize;

namespace {

// Standard normal quantile through erfinv, in float64.
double normal_quantile(double p) {
  return std::sqrt(2.0) * at::erfinv(at::tensor({2.0 * p - 1.0}, at::kDouble)).item<double>();
}

std::vector<double> linspace(double from, double to, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(from + (to - from) * i / (n - 1));
  return out;
}

}  // namespace

TEST_CASE("the NF4 levels are QLoRA's normal quantiles", "[nf4]") {
  // QLoRA: 8 positive quantiles of linspace(offset, 0.5, 9) without its last point, 7 negative ones
  // of linspace(offset, 0.5, 8), and 0, divided by the largest; offset = 0.9677083 (the
  // midpoint of 1 - 1/(2*15) and 1 - 1/(2*16)).
  const double offset = 0.9677083;
  std::vector<double> values = {0.0};
  const auto positive = linspace(offset, 0.5, 9), negative = linspace(offset, 0.5, 8);
  for (int i = 0; i < 8; ++i) values.push_back(normal_quantile(positive[i]));
  for (int i = 0; i < 7; ++i) values.push_back(-normal_quantile(negative[i]));
  const double largest = normal_quantile(offset);
  std::sort(values.begin(), values.end());
  REQUIRE(values.size() == 16);
  for (int i = 0; i < 16; ++i) {
    INFO("level " << i);
    CHECK(kNf4Levels[i] == Approx(values[i] / largest).epsilon(0).margin(2e-7));
  }
  CHECK(kNf4Levels[7] == 0.0f);
  CHECK(kNf4Levels[0] == -1.0f);
  CHECK(kNf4Levels[15] == 1.0f);
}

TEST_CASE("NF4 codes are the nearest levels of each block's absmax-scaled values", "[nf4]") {
  std::mt19937_64 rng(20261201);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{7, 19}, {3, 64}, {129}}) {
    for (const int64_t block : {64, 32, 2}) {
      INFO("shape " << shape.size() << "d, numel " << shape.back() << ", block " << block);
      int64_t n = 1;
      for (auto d : shape) n *= d;
      std::vector<float> w(n);
      for (auto& x : w) x = normal(rng);
      if (n > 70) std::fill(w.begin() + 64, w.begin() + 70, 0.0f);  // part of a zero run
      const at::Tensor weight = at::tensor(w).view(shape);
      const auto q = nf4_quantize(weight, block);
      CHECK(q.packed.numel() == (n + 1) / 2);
      CHECK(q.absmax.numel() == (n + block - 1) / block);
      const at::Tensor codes = nf4_codes(q).view({-1});
      const at::Tensor deq = nf4_dequantize(q).view({-1});
      CHECK(nf4_codes(q).sizes() == weight.sizes());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / block;
        float absmax = 0;
        for (int64_t j = b * block; j < std::min(n, (b + 1) * block); ++j)
          absmax = std::max(absmax, std::abs(w[j]));
        REQUIRE(q.absmax[b].item<float>() == absmax);
        const float scaled = absmax > 0 ? w[i] / absmax : 0.0f;
        int best = 0;
        for (int l = 1; l < 16; ++l)
          if (std::abs(scaled - kNf4Levels[l]) < std::abs(scaled - kNf4Levels[best])) best = l;
        const int code = codes[i].item<uint8_t>();
        // Equal distance (to float rounding of the midpoints) may go either way.
        if (code != best)
          CHECK(std::abs(std::abs(scaled - kNf4Levels[code]) -
                         std::abs(scaled - kNf4Levels[best])) < 1e-6f);
        CHECK(deq[i].item<float>() == kNf4Levels[code] * absmax);
      }
    }
  }
}

TEST_CASE("NF4 packing follows bitsandbytes: the first element in the high nibble", "[nf4]") {
  // Levels 15, 0, 7, 8, 14 (block 64: absmax 1).
  const at::Tensor w = at::tensor({1.0f, -1.0f, 0.0f, 0.0796f, 0.72f});
  const auto q = nf4_quantize(w, 64);
  REQUIRE(q.packed.numel() == 3);
  CHECK(q.packed[0].item<uint8_t>() == 0xF0);
  CHECK(q.packed[1].item<uint8_t>() == 0x78);
  CHECK(q.packed[2].item<uint8_t>() == 0xE0);  // the odd last code, padded with 0
  CHECK(nf4_dequantize(q).equal(at::tensor({1.0f, -1.0f, 0.0f, kNf4Levels[8], kNf4Levels[14]})));
  // Dequantized into another dtype on request (float32 arithmetic, then the cast).
  CHECK(nf4_dequantize(q, at::kBFloat16).scalar_type() == at::kBFloat16);
}

TEST_CASE("NF4 rejects bad blocks, empty and non-finite weights, mismatched buffers", "[nf4]") {
  using rqat::test::require_error;
  require_error([] { nf4_quantize(at::ones({4}), 3); }, {"block size", "3"});
  require_error([] { nf4_quantize(at::ones({0}), 64); }, {"empty"});
  require_error(
      [] {
        nf4_quantize(at::tensor({1.0f, std::numeric_limits<float>::infinity()}), 64);
      },
      {"non-finite"});
  auto q = nf4_quantize(at::ones({10}), 4);
  q.absmax = q.absmax.slice(0, 0, 2);
  require_error([&] { nf4_dequantize(q); }, {"absmax", "block 4"});
}

TEST_CASE("the dynamic 8-bit map of double quantization is bitsandbytes' construction", "[nf4]") {
  // For i = 0..6: the 2^i midpoints of linspace(0.1, 1, 2^i + 1), times +-10^(i-6); plus 0 and 1.
  std::vector<double> expected = {0.0, 1.0};
  for (int i = 0; i < 7; ++i) {
    const int n = (1 << i) + 1;
    const auto bounds = linspace(0.1, 1.0, n);
    for (int k = 0; k + 1 < n; ++k) {
      const double mid = (bounds[k] + bounds[k + 1]) / 2 * std::pow(10.0, i - 6);
      expected.push_back(mid);
      expected.push_back(-mid);
    }
  }
  std::sort(expected.begin(), expected.end());
  const auto& map = rqat::quant::dynamic_map_signed();
  REQUIRE(expected.size() == 256);
  for (int i = 0; i < 256; ++i) {
    INFO("entry " << i);
    CHECK(map[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-12));
    if (i > 0) CHECK(map[i] > map[i - 1]);
  }
  // bitsandbytes' printed table: its smallest magnitudes and its extremes.
  CHECK(map[127] == 0.0f);
  CHECK(map[128] == Approx(5.5e-7).epsilon(1e-6));
  CHECK(map[0] == Approx(-0.99296875).epsilon(1e-6));
  CHECK(map[255] == 1.0f);
}

TEST_CASE("NF4 double quantization: absmax codes are the nearest map entries", "[nf4]") {
  std::mt19937_64 rng(20261202);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  // 700 blocks of 64: three blocks of 256 absmax values, the last one short.
  const int64_t n = 700 * 64;
  std::vector<float> w(n);
  for (auto& x : w) x = normal(rng);
  const at::Tensor weight = at::tensor(w);
  const auto single = nf4_quantize(weight, 64);
  const auto q = nf4_quantize(weight, 64, /*double_quant=*/true);
  REQUIRE(q.double_quant);
  // The 4-bit codes are those of the exact absmax.
  CHECK(at::equal(q.packed, single.packed));
  const auto& map = rqat::quant::dynamic_map_signed();
  const at::Tensor exact = single.absmax;
  const float offset = exact.mean().item<float>();
  CHECK(q.offset == offset);
  REQUIRE(q.absmax_codes.numel() == 700);
  REQUIRE(q.nested_absmax.numel() == 3);
  for (int64_t b = 0; b < 700; ++b) {
    const int64_t block = b / 256;
    float nested = 0;
    for (int64_t j = block * 256; j < std::min<int64_t>(700, (block + 1) * 256); ++j)
      nested = std::max(nested, std::abs(exact[j].item<float>() - offset));
    REQUIRE(q.nested_absmax[block].item<float>() == nested);
    const float scaled = (exact[b].item<float>() - offset) / nested;
    int best = 0;
    for (int l = 1; l < 256; ++l)
      if (std::abs(scaled - map[l]) < std::abs(scaled - map[best])) best = l;
    const int code = q.absmax_codes[b].item<uint8_t>();
    if (code != best)
      CHECK(std::abs(std::abs(scaled - map[code]) - std::abs(scaled - map[best])) < 1e-6f);
    // Decoded as bitsandbytes decodes it, and used by dequantization.
    CHECK(q.absmax[b].item<float>() == map[code] * nested + offset);
  }
  const at::Tensor deq = nf4_dequantize(q);
  const at::Tensor codes = nf4_codes(q).to(at::kLong);
  const at::Tensor levels = at::tensor(std::vector<float>(kNf4Levels.begin(), kNf4Levels.end()));
  CHECK(at::equal(deq, levels.index_select(0, codes) * q.absmax.repeat_interleave(64)));
  // The compressed scales cost little: the decoded absmax stays within 1% of the exact one here.
  CHECK(((q.absmax - exact).abs() / exact).max().item<float>() < 0.01f);
}

TEST_CASE("Nf4Linear computes x W^T + b from its decoded weight, and keeps no parameter", "[nf4]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const auto w = at::randn({24, 64}, gen) * 0.05;
  const auto b = at::randn({24}, gen);
  const auto layer = rqat::quant::Nf4Linear::quantize(w, b, 64, true);
  CHECK(layer->parameters().empty());
  const auto x = at::randn({3, 5, 64}, gen);
  const auto decoded = nf4_dequantize(layer->nf4());
  CHECK(at::allclose(layer->forward(x), at::matmul(x, decoded.t()) + b, 1e-5, 1e-6));
  CHECK(at::equal(layer->effective_weight(), decoded));
  CHECK(layer->in_features() == 64);
  CHECK(layer->out_features() == 24);
  // bf16 inputs compute in bf16.
  CHECK(layer->forward(x.to(at::kBFloat16)).scalar_type() == at::kBFloat16);
}
