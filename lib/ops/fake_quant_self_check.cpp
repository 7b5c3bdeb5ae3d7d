// The first-use self-check of the fake-quant kernels (ops/kernel_self_checks.h): the fused STE
// forward and backward (CPU loops or CUDA kernels) against their ATen composites, and on CUDA the
// group-wise kernel against its plain-loop reference. All of them equal their twins bit for bit
// (their tests' claim), so the tolerance is 0. Cases: one weight, contiguous groups of an odd
// size, act-order (scales gathered per column), and rounding ties, range edges, NaN and
// infinities, for 2, 3, 4 and 8 bits.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>

#include "ops/fake_quant.h"
#include "ops/fake_quant_ste.h"
#include "ops/kernel_self_checks.h"

namespace rqat::ops {

namespace {

struct SteCase {
  const char* name;
  int64_t rows, cols, group;
  int bits;
  bool act_order, special_values;
};

// Power-of-two scales make w = (k + 1/2 - z) s an exact tie of w / s; zeros are whole codes.
struct SteOperands {
  at::Tensor w, scales, zeros, g_idx, grad;
};

SteOperands ste_operands(const SteCase& c, uint64_t seed, const c10::Device& device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t max_code = (int64_t{1} << c.bits) - 1;
  const int64_t groups = (c.cols + c.group - 1) / c.group;
  auto columns = c.act_order ? at::randperm(c.cols, gen, at::kLong) : at::arange(c.cols, at::kLong);
  auto g_idx = at::floor_divide(columns, c.group).to(at::kInt);
  auto scales = at::pow(2.0, -at::randint(3, 9, {c.rows, groups}, gen).to(at::kFloat));
  auto zeros = at::randint(0, max_code + 1, {c.rows, groups}, gen).to(at::kFloat);
  auto s = scales.index_select(1, g_idx.to(at::kLong));
  auto z = zeros.index_select(1, g_idx.to(at::kLong));
  // Codes from below the range to above it, half of them exact ties.
  auto k = at::randint(-3, max_code + 4, {c.rows, c.cols}, gen).to(at::kFloat);
  auto tie = at::randint(0, 2, {c.rows, c.cols}, gen).to(at::kFloat) * 0.5;
  auto w = (k + tie - z) * s;
  if (c.special_values && w.numel() >= 6) {
    const float inf = std::numeric_limits<float>::infinity();
    auto flat = w.view({-1});
    flat[0] = std::numeric_limits<float>::quiet_NaN();
    flat[1] = inf;
    flat[2] = -inf;
    flat[3] = 1e30f;  // w / s past 2^23: already an integer
    flat[4] = -0.0f;
    flat[5] = std::numeric_limits<float>::denorm_min();
  }
  auto grad = at::randn({c.rows, c.cols}, gen);
  return {w.to(device), scales.to(device), zeros.to(device), g_idx.to(device), grad.to(device)};
}

struct GroupwiseCase {
  const char* name;
  int64_t rows, cols, group;
  int bits;
  at::ScalarType dtype;
};

}  // namespace

KernelCheck check_fake_quant(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const SteCase ste_cases[] = {
      {"ste one weight, 4 bits", 1, 1, 1, 4, false, false},
      {"ste groups of 11, 2 bits", 9, 33, 11, 2, false, false},
      {"ste act-order groups of 8, 3 bits", 6, 36, 8, 3, true, false},
      {"ste one group per row, NaN/inf/ties, 8 bits", 4, 40, 40, 8, false, true},
      {"ste act-order groups of 32, 4 bits", 8, 256, 32, 4, true, true},
  };
  uint64_t seed = 0x5eed0001;
  for (const auto& c : ste_cases) {
    cases.run(c.name, [&] {
      const auto op = ste_operands(c, seed++, device);
      const int64_t max_code = (int64_t{1} << c.bits) - 1;
      cases.compare_exact(
          fake_quantize_ste_forward(op.w, op.scales, op.zeros, op.g_idx, max_code),
          fake_quantize_ste_forward_ref(op.w, op.scales, op.zeros, op.g_idx, max_code));
      cases.compare_exact(
          fake_quantize_ste_backward(op.grad, op.w, op.scales, op.zeros, op.g_idx, max_code),
          fake_quantize_ste_backward_ref(op.grad, op.w, op.scales, op.zeros, op.g_idx, max_code));
    });
  }
  if (device.is_cuda()) {
    const GroupwiseCase groupwise_cases[] = {
        {"group-wise one weight, 2 bits", 1, 1, 1, 2, at::kFloat},
        {"group-wise groups of 11, 3 bits, bf16", 9, 33, 11, 3, at::kBFloat16},
        {"group-wise groups of 32, 4 bits", 7, 96, 32, 4, at::kFloat},
        {"group-wise per row, 8 bits, bf16", 4, 40, -1, 8, at::kBFloat16},
    };
    for (const auto& c : groupwise_cases) {
      cases.run(c.name, [&] {
        const int64_t group = c.group <= 0 ? c.cols : c.group;
        auto w = (check_randn({c.rows, c.cols}, seed++, at::kCPU) * 0.05).to(c.dtype);
        auto grouped = w.to(at::kFloat).view({c.rows, -1, group});
        auto lo = grouped.amin(-1).clamp_max(0), hi = grouped.amax(-1).clamp_min(0);
        auto scales = ((hi - lo) / ((1 << c.bits) - 1)).clamp_min(1e-8);
        auto zeros = at::round(-lo / scales);
        cases.compare_exact(fake_quantize_groupwise_cuda(w.to(device), scales.to(device),
                                                         zeros.to(device), c.bits, c.group),
                            fake_quantize_groupwise_ref(w, scales, zeros, c.bits, c.group));
      });
    }
  }
  return cases.finish();
}

}  // namespace rqat::ops
