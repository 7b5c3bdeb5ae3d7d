// The fake-quantization CUDA kernels against the CPU, bit for bit, on awkward shapes: the
// group-wise forward against its reference, and the fused frozen-scale STE forward and backward
// (act-order g_idx, weights at rounding ties and range edges, NaN and infinities) against the CPU
// kernels and the ATen composite, also through autograd. Without a GPU (or without CUDA kernels
// in the build) it prints why and exits 77, which CTest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include "catch.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <cmath>
#include <iostream>
#include <limits>

#include "ops/fake_quant.h"
#include "ops/fake_quant_ste.h"
#include "quant/fake_quant_linear.h"
#include "test_util.h"

TEST_CASE("fake quant CUDA kernel equals the CPU reference") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 32, 32}, {7, 96, 32}, {3, 256, 128},    {4, 40, -1},
                          {1, 1, 1},   {9, 33, 11}, {2048, 4096, 128}};
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (auto dtype : {at::kFloat, at::kBFloat16}) {
        INFO("rows " << s.rows << " cols " << s.cols << " group " << s.group << " bits " << bits);
        const int64_t group = s.group <= 0 ? s.cols : s.group;
        auto w = (at::randn({s.rows, s.cols}, gen) * 0.05).to(dtype);
        auto g = w.to(at::kFloat).view({s.rows, -1, group});
        auto lo = g.amin(-1).clamp_max(0), hi = g.amax(-1).clamp_min(0);
        auto scale = ((hi - lo) / ((1 << bits) - 1)).clamp_min(1e-8);
        auto zero = at::round(-lo / scale);
        auto ref = rqat::ops::fake_quantize_groupwise_ref(w, scale, zero, bits, s.group);
        auto gpu = rqat::ops::fake_quantize_groupwise_cuda(w.cuda(), scale.cuda(), zero.cuda(),
                                                           bits, s.group)
                       .cpu();
        CHECK(at::equal(gpu, ref));
      }
    }
  }
}

namespace {

// Bit patterns, so that -0 != +0, with every NaN alike: a NaN's payload and sign are the
// hardware's (x86 propagates the input's quiet NaN, NVIDIA GPUs write the canonical 0x7fffffff;
// the first H200 run of this test differed in nothing else).
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || !at::equal(at::isnan(a), at::isnan(b))) return false;
  const auto canonical = [](const at::Tensor& t) {
    return at::where(at::isnan(t), at::full({}, std::nanf(""), t.options()), t).contiguous();
  };
  return at::equal(canonical(a).view(at::kInt), canonical(b).view(at::kInt));
}

}  // namespace

TEST_CASE("fused fake quant STE CUDA kernels equal the CPU kernels") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(22);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 1, 1}, {9, 33, 11}, {6, 36, 8}, {4, 40, 40}, {2048, 4096, 128}};
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (bool act_order : {false, true}) {
        INFO("rows " << s.rows << " cols " << s.cols << " group " << s.group << " bits " << bits
                     << " act-order " << act_order);
        const int64_t max_code = (int64_t{1} << bits) - 1;
        const int64_t groups = (s.cols + s.group - 1) / s.group;
        auto columns =
            act_order ? at::randperm(s.cols, gen, at::kLong) : at::arange(s.cols, at::kLong);
        auto g_idx = at::floor_divide(columns, s.group).to(at::kInt);
        // Power-of-two scales make w = (k + 1/2 - z) s an exact tie of w / s.
        auto scales = at::pow(2.0, -at::randint(4, 10, {s.rows, groups}, gen).to(at::kFloat));
        auto zeros = at::randint(0, max_code + 1, {s.rows, groups}, gen).to(at::kFloat);
        auto s_col = scales.index_select(1, g_idx.to(at::kLong));
        auto z_col = zeros.index_select(1, g_idx.to(at::kLong));
        auto k = at::randint(-2, max_code + 2, {s.rows, s.cols}, gen).to(at::kFloat);
        auto u = at::rand({s.rows, s.cols}, gen);
        auto w = at::randn({s.rows, s.cols}, gen) * 0.1;
        w = at::where(u < 0.2, (k + 0.5 - z_col) * s_col, w);                       // ties
        w = at::where(at::logical_and(u >= 0.2, u < 0.3), (k - z_col) * s_col, w);  // on codes
        w.view(-1)[0] = std::nanf("");
        if (w.numel() > 2) {
          w.view(-1)[1] = inf;
          w.view(-1)[2] = -inf;
        }
        auto grad = at::randn({s.rows, s.cols}, gen);

        auto cpu_fwd = rqat::ops::fake_quantize_ste_forward(w, scales, zeros, g_idx, max_code);
        auto cpu_bwd =
            rqat::ops::fake_quantize_ste_backward(grad, w, scales, zeros, g_idx, max_code);
        CHECK(same_bits(
            cpu_fwd, rqat::ops::fake_quantize_ste_forward_ref(w, scales, zeros, g_idx, max_code)));
        auto gpu_fwd = rqat::ops::fake_quantize_ste_forward(w.cuda(), scales.cuda(), zeros.cuda(),
                                                            g_idx.cuda(), max_code);
        auto gpu_bwd = rqat::ops::fake_quantize_ste_backward(grad.cuda(), w.cuda(), scales.cuda(),
                                                             zeros.cuda(), g_idx.cuda(), max_code);
        CHECK(same_bits(gpu_fwd.cpu(), cpu_fwd));
        CHECK(same_bits(gpu_bwd.cpu(), cpu_bwd));
        // The ATen composite on the GPU agrees as well (it is the LSQ path there).
        CHECK(same_bits(rqat::ops::fake_quantize_ste_forward_ref(
                            w.cuda(), scales.cuda(), zeros.cuda(), g_idx.cuda(), max_code)
                            .cpu(),
                        cpu_fwd));

        // Through autograd: the weight gradient of sum(w_q * grad) is the STE gradient.
        auto w_gpu = w.cuda().requires_grad_(true);
        auto y =
            rqat::quant::fake_quantize_ste(w_gpu, scales.cuda(), zeros.cuda(), g_idx.cuda(), bits);
        (y * grad.cuda()).sum().backward();
        CHECK(same_bits(y.detach().cpu(), cpu_fwd));
        CHECK(same_bits(w_gpu.grad().cpu(), cpu_bwd));
      }
    }
  }
}

int main(int argc, char** argv) {
  if (const int skip = rqat::test::cuda_tests_skipped()) return skip;
  return Catch::Session().run(argc, argv);
}
