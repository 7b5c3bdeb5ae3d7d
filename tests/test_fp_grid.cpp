// The GPU formats' grids (quant/fp_grid.h) against their definitions, computed here by plain
// scalar loops: E2M1 and E4M3 rounding over every value and midpoint (ties to the even code,
// saturation), and NVFP4, MXFP4 and FP8 quantization of awkward shapes (rows not a multiple of the
// block, an all-zero block, an outlier) compared bit for bit; NaN, infinity and 1-D refused.
#include "catch.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "ops/weight_formats.h"
#include "quant/fp_grid.h"
#include "test_util.h"

using namespace rqat;
using quant::FpGrid;

namespace {

// The non-negative values of a format by code, and the nearest one to |x| (ties to the even
// code, saturating at the last), signed as x.
float nearest(const std::vector<float>& values, float x) {
  const float a = std::fabs(x);
  if (a >= values.back()) return std::signbit(x) ? -values.back() : values.back();  // saturate
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    const float d = std::fabs(values[i] - a), db = std::fabs(values[best] - a);
    if (d < db || (d == db && i % 2 == 0)) best = i;
  }
  return std::signbit(x) ? -values[best] : values[best];
}

std::vector<float> e2m1_values() { return {0, 0.5f, 1, 1.5f, 2, 3, 4, 6}; }

// E4M3 (fn): exponent bias 7, subnormals m/8 2^-6, no infinity, S.1111.111 the only NaN.
std::vector<float> e4m3_values() {
  std::vector<float> out;
  for (int e = 0; e < 16; ++e)
    for (int m = 0; m < 8; ++m) {
      if (e == 15 && m == 7) continue;
      out.push_back(e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1 + m / 8.0f, e - 7));
    }
  return out;
}

struct Reference {
  std::vector<float> codes, scales, dequantized;
  float global = 1;
};

// The format's definition, one block at a time.
Reference reference(const at::Tensor& w, FpGrid grid) {
  const auto e2m1 = e2m1_values(), e4m3 = e4m3_values();
  const int64_t rows = w.size(0), cols = w.size(1);
  const int64_t block = grid == FpGrid::kNvfp4 ? 16 : grid == FpGrid::kMxfp4 ? 32 : cols;
  const auto acc = w.accessor<float, 2>();
  Reference r;
  float tensor_amax = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) tensor_amax = std::max(tensor_amax, std::fabs(acc[i][j]));
  // 448 * 6 / amax as compressed-tensors evaluates it (PyTorch's scalar / tensor is the scalar
  // times the tensor's reciprocal).
  if (grid == FpGrid::kNvfp4)
    r.global = tensor_amax > 0 ? 448.0f * 6.0f * (1.0f / tensor_amax) : 1.0f;
  r.codes.assign(rows * cols, 0);
  r.dequantized.assign(rows * cols, 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
      const int64_t b1 = std::min(cols, b0 + block);
      float amax = 0;
      for (int64_t j = b0; j < b1; ++j) amax = std::max(amax, std::fabs(acc[i][j]));
      float scale = 0;
      if (grid == FpGrid::kNvfp4) {
        scale = nearest(e4m3, amax / 6.0f * r.global);
      } else if (grid == FpGrid::kMxfp4) {
        int e = 0;
        std::frexp(amax, &e);
        scale = amax > 0 ? std::ldexp(1.0f, std::clamp(e - 3, -127, 127)) : std::ldexp(1.0f, -127);
      } else {
        scale = std::max(amax / 448.0f, std::numeric_limits<float>::epsilon());
      }
      r.scales.push_back(scale);
      for (int64_t j = b0; j < b1; ++j) {
        float code = 0;
        if (grid == FpGrid::kNvfp4 && scale > 0)
          code = nearest(e2m1, acc[i][j] / (scale / r.global));
        if (grid == FpGrid::kMxfp4) code = nearest(e2m1, acc[i][j] / scale);
        if (grid == FpGrid::kFp8) code = nearest(e4m3, acc[i][j] / scale);
        r.codes[i * cols + j] = code;
        r.dequantized[i * cols + j] = code * (grid == FpGrid::kNvfp4 ? scale / r.global : scale);
      }
    }
  return r;
}

std::vector<float> values_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace

TEST_CASE("E2M1 and E4M3 rounding: every value kept, midpoints to the even code, saturation") {
  using TensorRounding = at::Tensor (*)(const at::Tensor&);  // the tensor overloads
  for (const auto& [values, round, largest] :
       {std::tuple{e2m1_values(), static_cast<TensorRounding>(&quant::round_to_e2m1), 6.0f},
        std::tuple{e4m3_values(), static_cast<TensorRounding>(&quant::round_to_e4m3), 448.0f}}) {
    std::vector<float> inputs;
    for (size_t i = 0; i < values.size(); ++i) {
      inputs.push_back(values[i]);
      if (i + 1 < values.size()) {
        const float mid = (values[i] + values[i + 1]) / 2;
        inputs.insert(inputs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
      }
    }
    inputs.insert(inputs.end(), {largest * 1.01f, largest * 3, 1e30f});
    const size_t positives = inputs.size();
    for (size_t i = 0; i < positives; ++i) inputs.push_back(-inputs[i]);
    const auto got = values_of((*round)(at::tensor(inputs)));
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("x = " << inputs[i]);
      CHECK(got[i] == nearest(values, inputs[i]));
    }
  }
  // The ties E2M1 takes, written out.
  const auto ties = values_of(quant::round_to_e2m1(
      at::tensor(std::vector<float>{0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})));
  CHECK(ties == std::vector<float>{0, 1, 1, 2, 2, 4, 4});
  CHECK(e4m3_values().back() == 448.0f);
  CHECK(e4m3_values().size() == 127);
}

TEST_CASE("nvfp4, mxfp4 and fp8 quantize as their definitions say, on awkward shapes") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(46);
  at::Tensor w = at::randn({5, 75}, gen) * 0.05;  // 75: 4 blocks of 16 + 11, 2 of 32 + 11
  w[1].narrow(0, 16, 16).zero_();                 // an all-zero nvfp4 block
  w[2].narrow(0, 32, 32).zero_();                 // and an mxfp4 one
  w[3].zero_();                                   // an all-zero row (fp8)
  w[4][70] = 3.5;                                 // an outlier
  for (const FpGrid grid : {FpGrid::kNvfp4, FpGrid::kMxfp4, FpGrid::kFp8}) {
    INFO(enum_name(grid));
    const auto q = quant::fp_quantize(w, grid, "w");
    const Reference r = reference(w, grid);
    CHECK(q.global_scale == r.global);
    CHECK(values_of(q.codes) == r.codes);
    CHECK(values_of(q.scales) == r.scales);
    CHECK(values_of(quant::fp_dequantize(q)) == r.dequantized);
    // The row of the table gives the block.
    const auto* format = ops::weight_format(enum_name(grid));
    REQUIRE(format != nullptr);
    CHECK(format->grid == ops::WeightGrid::kFloat);
    if (grid != FpGrid::kFp8) CHECK(q.block == format->sub_block);
    // Error: at most half a step of the element grid times the scale, except where saturated.
    const at::Tensor err = (quant::fp_dequantize(q) - w).abs();
    CHECK(err.max().item<float>() < 0.5f * w.abs().max().item<float>());
  }
  // NVFP4's scales are E4M3 numbers and MXFP4's powers of two.
  const auto nv = quant::fp_quantize(w, FpGrid::kNvfp4, "w");
  CHECK(at::equal(quant::round_to_e4m3(nv.scales), nv.scales));
  const auto mx = quant::fp_quantize(w, FpGrid::kMxfp4, "w");
  const auto [mantissa, exponent] = at::frexp(mx.scales);
  CHECK(at::all(mantissa == 0.5f).item<bool>());
}

TEST_CASE("fp grids refuse NaN, infinity and weights that are not 2-D") {
  at::Tensor w = at::ones({2, 16});
  w[1][3] = std::numeric_limits<float>::quiet_NaN();
  test::require_error([&] { quant::fp_quantize(w, FpGrid::kNvfp4, "layer.weight"); },
                      {"layer.weight", "NaN or infinite", "nvfp4"});
  w[1][3] = std::numeric_limits<float>::infinity();
  test::require_error([&] { quant::fp_quantize(w, FpGrid::kFp8, "layer.weight"); },
                      {"layer.weight", "fp8"});
  test::require_error([] { quant::fp_quantize(at::ones({16}), FpGrid::kMxfp4, "b"); },
                      {"b", "2-D"});
  test::require_error(
      [] {
        quant::fp_quantize(at::ones({3, 0}), FpGrid::kFp8, "e");
      },
      {"e", "empty"});
  // An all-zero weight: nvfp4's global scale 1, zeros back.
  const auto zero = quant::fp_quantize(at::zeros({2, 16}), FpGrid::kNvfp4, "z");
  CHECK(zero.global_scale == 1.0f);
  CHECK(at::equal(quant::fp_dequantize(zero), at::zeros({2, 16})));
}
