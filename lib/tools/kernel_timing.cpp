// See kernel_timing.h. Each kernel is timed on the operands its path takes in a model of about
// Qwen3-0.6B's size (hidden 1024, 16/8 heads of 128, 151,936 ids) on a GPU; a CPU gets smaller
// layers so that the doctor stays quick there.
#include "tools/kernel_timing.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "ops/attention.h"
#include "ops/cpu_target.h"
#include "ops/fake_quant_ste.h"
#include "ops/forward_kl.h"
#include "ops/kernel_self_checks.h"
#include "ops/low_bit_matmul.h"
#include "ops/low_bit_weight.h"
#include "ops/paged_attention.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"
#include "ops/token_sampling.h"

namespace rqat::tools {

namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : 0);
}

struct Pair {
  std::string shape;
  std::function<void()> custom, twin;
};

Pair fake_quant_pair(const c10::Device& device) {
  const int64_t n = device.is_cuda() ? 4096 : 1024, group = 128, groups = n / group;
  auto w = ops::check_randn({n, n}, 1, device) * 0.05;
  auto scales = at::full({n, groups}, 0.01, w.options());
  auto zeros = at::full({n, groups}, 8.0, w.options());
  auto g_idx = at::floor_divide(at::arange(n, w.options().dtype(at::kInt)), group);
  return {fmt::format("W4 forward, {} x {} g{}", n, n, group),
          [=] { ops::fake_quantize_ste_forward(w, scales, zeros, g_idx, 15); },
          [=] { ops::fake_quantize_ste_forward_ref(w, scales, zeros, g_idx, 15); }};
}

Pair fused_attention_pair(const c10::Device& device) {
  const int64_t t = 256;
  auto q = ops::check_randn({1, 8, t, 64}, 2, device);
  auto k = ops::check_randn({1, 4, t, 64}, 3, device),
       v = ops::check_randn({1, 4, t, 64}, 4, device);
  auto mask = (at::arange(t).view({1, -1}) <= at::arange(t).view({-1, 1})).view({1, 1, t, t});
  return {fmt::format("forward, 8/4 heads of 64, {} causal positions", t),
          [=] { ops::fused_attention(q, k, v, mask); },
          [=] {
            at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt,
                                             /*enable_gqa=*/true);
          }};
}

Pair paged_decode_pair(const c10::Device& device) {
  const int64_t batch = 16, context = 2048, block = 16, blocks = context / block;
  const auto dtype = at::kBFloat16;
  auto q = ops::check_randn({batch, 16, 128}, 5, device, dtype);
  auto keys = ops::check_randn({batch * blocks + 1, block, 8, 128}, 6, device, dtype);
  auto values = ops::check_randn({batch * blocks + 1, block, 8, 128}, 7, device, dtype);
  auto tables = (at::arange(batch * blocks, at::kInt) + 1).view({batch, blocks}).to(device);
  auto lens = at::full({batch}, context, at::kInt).to(device);
  return {fmt::format("bf16, batch {} x {} cached positions, 16/8 heads of 128", batch, context),
          [=] { ops::paged_decode_attention_cuda(q, keys, values, tables, lens); },
          [=] { ops::paged_decode_attention_ref(q, keys, values, tables, lens); }};
}

Pair low_bit_pair(const c10::Device& device) {
  const int64_t n = device.is_cuda() ? 4096 : 2048, group = 128;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const auto codes = at::randint(0, 16, {n, n}, gen, at::kInt);
  const auto scales = at::rand({n, n / group}, gen) * 0.1 + 0.01;
  const auto zeros = at::full({n, n / group}, 8.0);
  const auto weight =
      ops::pack_low_bit(codes, scales, zeros, 4, group, at::Tensor(), "doctor").to(device);
  const auto dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  auto x = ops::check_randn({1, n}, 9, device, dtype);
  const bool cuda = device.is_cuda();
  return {fmt::format("W4 g{} {} x {}, one row, {}{}", group, n, n, c10::toString(dtype),
                      cuda ? "" : fmt::format(", {} code", enum_name(ops::cpu_target()))),
          [=] {
            cuda ? ops::low_bit_matmul_cuda_kernel(x, weight)
                 : ops::low_bit_matmul_cpu_kernel(x, weight);
          },
          [=] { ops::low_bit_matmul_dense(x, weight); }};
}

Pair token_sampling_pair(const c10::Device& device) {
  const int64_t rows = 8, vocab = 151936;
  auto logits = ops::check_randn({rows, vocab}, 10, device) * 3;
  ops::SamplingTensors s;
  const auto opts = logits.options();
  s.inv_temperature = at::full({rows}, 1 / 0.7, opts);
  s.greedy = at::zeros({rows}, opts.dtype(at::kBool));
  s.top_k = at::zeros({rows}, opts.dtype(at::kLong));
  s.top_p = at::full({rows}, 0.95, opts.dtype(at::kDouble));
  s.min_p = at::zeros({rows}, opts.dtype(at::kDouble));
  s.uniform = at::full({rows}, 0.5, opts.dtype(at::kDouble));
  return {fmt::format("{} rows x {} ids, T 0.7, top-p 0.95", rows, vocab),
          [=] { ops::sample_tokens_cpu_kernel(logits, s); },
          [=] { ops::sample_tokens_ref(logits, s); }};
}

// A training step's norm, forward and backward (the backward is where the composite pays most).
Pair rms_norm_pair(const c10::Device& device) {
  const int64_t rows = device.is_cuda() ? 8192 : 512, dim = 1024;
  const auto dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  auto x = ops::check_randn({rows, dim}, 11, device, dtype).requires_grad_();
  auto w = (1 + 0.1 * ops::check_randn({dim}, 12, device, dtype)).requires_grad_();
  auto grad = ops::check_randn({rows, dim}, 13, device, dtype);
  const auto step = [=](bool fused) {
    at::AutoGradMode enable(true);
    auto y = fused ? ops::fused_rms_norm(x, w, 1e-6) : ops::rms_norm_ref(x, w, 1e-6);
    torch::autograd::grad({y}, {x, w}, {grad});
  };
  return {fmt::format("forward and backward, {} rows of {}, {}", rows, dim, c10::toString(dtype)),
          [=] { step(true); }, [=] { step(false); }};
}

// A qat-kd step's loss over a batch of 2 x 256 tokens and a 32k vocabulary, forward and backward:
// its four (rows, vocab) float tensors take 270 MB, light enough for a doctor run on a small node
// and still far beyond any cache, as a real step's logits are.
Pair forward_kl_pair(const c10::Device& device) {
  const int64_t rows = 512, vocab = 32768;
  auto student = (3 * ops::check_randn({rows, vocab}, 14, device)).requires_grad_();
  auto teacher = 3 * ops::check_randn({rows, vocab}, 15, device);
  const auto step = [=](bool fused) {
    at::AutoGradMode enable(true);
    auto kl = fused ? ops::fused_forward_kl(student, teacher, 1.0)
                    : ops::forward_kl_ref(student, teacher, 1.0);
    torch::autograd::grad({kl.sum()}, {student});
  };
  return {fmt::format("forward and backward, {} rows of {} logits, float32", rows, vocab),
          [=] { step(true); }, [=] { step(false); }};
}

// A training step's MLP activation at Qwen3-0.6B's width, forward and backward.
Pair swiglu_pair(const c10::Device& device) {
  const int64_t rows = 512, width = 3072;
  auto gate = ops::check_randn({rows, width}, 16, device).requires_grad_();
  auto up = ops::check_randn({rows, width}, 17, device).requires_grad_();
  auto grad = ops::check_randn({rows, width}, 18, device);
  const auto step = [=](bool fused) {
    at::AutoGradMode enable(true);
    auto h = fused ? ops::fused_swiglu(gate, up) : ops::swiglu_ref(gate, up);
    torch::autograd::grad({h}, {gate, up}, {grad});
  };
  return {fmt::format("forward and backward, {} rows of {}, float32", rows, width),
          [=] { step(true); }, [=] { step(false); }};
}

// A training step's rotary embedding of the queries at Qwen3-0.6B's width (16 heads of 128), x in
// the projection's order as the model passes it, forward and backward.
Pair rotary_pair(const c10::Device& device) {
  const int64_t batch = 4, steps = 256, heads = 16, dim = 128;
  auto x = ops::check_randn({batch, steps, heads, dim}, 19, device).transpose(1, 2);
  x.requires_grad_();
  const auto angles = ops::check_randn({batch, steps, dim}, 20, device);
  const auto cos = angles.cos(), sin = angles.sin();
  auto grad = ops::check_randn({batch, heads, steps, dim}, 21, device);
  const auto step = [=](bool fused) {
    at::AutoGradMode enable(true);
    auto y = fused ? ops::fused_rotary(x, cos, sin) : ops::rotary_ref(x, cos, sin);
    torch::autograd::grad({y}, {x}, {grad});
  };
  return {fmt::format("forward and backward, {} x {} positions, {} heads of {}, float32", batch,
                      steps, heads, dim),
          [=] { step(true); }, [=] { step(false); }};
}

std::optional<Pair> pair_of(ops::Kernel kernel, const c10::Device& device) {
  switch (kernel) {
    case ops::Kernel::kFakeQuant:
      return fake_quant_pair(device);
    case ops::Kernel::kFusedAttention:
      return fused_attention_pair(device);
    case ops::Kernel::kPagedDecodeAttention:
      return paged_decode_pair(device);
    case ops::Kernel::kLowBitMatmul:
      return low_bit_pair(device);
    case ops::Kernel::kTokenSampling:
      return token_sampling_pair(device);
    case ops::Kernel::kRmsNorm:
      return rms_norm_pair(device);
    case ops::Kernel::kForwardKl:
      return forward_kl_pair(device);
    case ops::Kernel::kSwiglu:
      return swiglu_pair(device);
    case ops::Kernel::kRotary:
      return rotary_pair(device);
    case ops::Kernel::kCudaGraphs:  // timed with its check (decode_graph_check.h)
    case ops::Kernel::kCount:
      break;
  }
  return std::nullopt;
}

}  // namespace

double milliseconds_per_call(const c10::Device& device, const std::function<void()>& body) {
  body();
  synchronize(device);
  auto start = Clock::now();
  body();
  synchronize(device);
  const double once = std::chrono::duration<double>(Clock::now() - start).count();
  const int calls = static_cast<int>(std::clamp(0.2 / std::max(once, 1e-6), 3.0, 200.0));
  start = Clock::now();
  for (int i = 0; i < calls; ++i) body();
  synchronize(device);
  return 1e3 * std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

std::vector<KernelTiming> time_kernels(const c10::Device& device) {
  std::vector<KernelTiming> out;
  ops::SelfCheckScope scope;
  for (size_t i = 0; i < static_cast<size_t>(ops::Kernel::kCount); ++i) {
    const auto kernel = static_cast<ops::Kernel>(i);
    if (!ops::custom_kernel_exists(kernel, device)) continue;
    KernelTiming timing{kernel, "", 0, 0, ""};
    try {
      const auto pair = pair_of(kernel, device);
      if (!pair) continue;
      timing.shape = pair->shape;
      timing.custom_ms = milliseconds_per_call(device, pair->custom);
      timing.twin_ms = milliseconds_per_call(device, pair->twin);
    } catch (const std::exception& e) {
      const std::string message = e.what();
      timing.error = message.substr(0, message.find('\n'));
    }
    out.push_back(std::move(timing));
  }
  return out;
}

}  // namespace rqat::tools
