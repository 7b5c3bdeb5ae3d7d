// The kernel choice of ops/kernel_choice.h on every device this machine has (the CPU, and a GPU
// when one is visible: the same cases run there unchanged): each custom kernel's first-use
// self-check passes; a fault just over its tolerance fails it; through the dispatchers the tools
// call, in auto a faulty kernel warns once and the results equal the twin's bit for bit, in custom
// the perturbed output is used (the hook reaches the kernel), and with no fault auto runs the
// custom kernel; the check leaves the process's random streams, inference mode and autocast alone;
// $RQAT_KERNELS and $RQAT_TEST_KERNEL_FAULT are read, and bad values are one-line errors.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>

#include "generation/generation_engine.h"
#include "model/init.h"
#include "ops/attention.h"
#include "ops/fake_quant.h"
#include "ops/forward_kl.h"
#include "ops/kernel_choice.h"
#include "ops/low_bit_matmul.h"
#include "ops/paged_attention.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"
#include "ops/token_sampling.h"
#include "quant/fake_quant_linear.h"
#include "test_util.h"

using namespace rqat;
using ops::Kernel;
using ops::KernelMode;

namespace {

// attention() takes the fused kernels in auto only on CPUs where they beat SDPA (AVX-512): the
// dispatch cases below need them wherever the tests run.
const bool kFusedAttentionForced = (setenv("RQAT_FUSED_ATTENTION", "1", 1), true);

std::vector<c10::Device> devices() {
  std::vector<c10::Device> out{c10::kCPU};
#ifdef RQAT_WITH_CUDA
  if (torch::cuda::is_available()) out.emplace_back(c10::kCUDA, 0);
#endif
  return out;
}

std::vector<Kernel> kernels_on(const c10::Device& device) {
  std::vector<Kernel> out;
  for (size_t i = 0; i < static_cast<size_t>(Kernel::kCount); ++i)
    if (ops::custom_kernel_exists(static_cast<Kernel>(i), device))
      out.push_back(static_cast<Kernel>(i));
  return out;
}

// What a tool's call through the kernel's dispatcher computes, flattened to float64 on the CPU.
at::Tensor flat(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat_parts;
  for (const auto& p : parts)
    flat_parts.push_back(p.detach().to(at::kCPU, at::kDouble).reshape(-1));
  return at::cat(flat_parts);
}

at::Tensor fake_quant_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto w = (at::randn({6, 40}, gen) * 0.1).to(d).requires_grad_();
  auto scales = (at::rand({6, 5}, gen) * 0.02 + 0.01).to(d);
  auto zeros = at::randint(0, 16, {6, 5}, gen).to(at::kFloat).to(d);
  auto g_idx = at::floor_divide(at::randperm(40, gen, at::kLong), 8).to(at::kInt).to(d);
  auto wq = quant::fake_quantize_ste(w, scales, zeros, g_idx, 4);
  auto grad = torch::autograd::grad({wq}, {w}, {at::randn({6, 40}, gen).to(d)})[0];
  std::vector<at::Tensor> parts{wq, grad};
  if (d.is_cuda()) parts.push_back(ops::fake_quantize_groupwise(w.detach(), scales, zeros, 4, 8));
  return flat(parts);
}

at::Tensor attention_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  // Batch rows x two key/value heads: at least a task per thread, which the fused CPU kernels
  // ask for (a 16-core GPU machine runs this test with 16 threads).
  const int64_t batch = std::max<int64_t>(2, (at::get_num_threads() + 1) / 2);
  auto q = at::randn({batch, 4, 9, 16}, gen).to(d).requires_grad_();
  auto k = at::randn({batch, 2, 9, 16}, gen).to(d).requires_grad_();
  auto v = at::randn({batch, 2, 9, 16}, gen).to(d).requires_grad_();
  auto mask = (at::arange(9).view({1, -1}) <= at::arange(9).view({-1, 1})).view({1, 1, 9, 9});
  auto out = ops::attention(q, k, v, mask.to(d));
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {at::randn(out.sizes(), gen).to(d)});
  return flat({out, grads[0], grads[1], grads[2]});
}

at::Tensor paged_decode_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto q = at::randn({2, 8, 64}, gen).to(d, at::kBFloat16);
  auto keys = at::randn({9, 16, 2, 64}, gen).to(d, at::kBFloat16);
  auto values = at::randn({9, 16, 2, 64}, gen).to(d, at::kBFloat16);
  auto tables = at::arange(1, 9, at::kInt).view({2, 4}).to(d);
  auto lens = at::tensor(std::vector<int32_t>{17, 64}, at::kInt).to(d);
  return flat({ops::paged_decode_attention(q, keys, values, tables, lens)});
}

at::Tensor low_bit_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  const auto weight = test::random_low_bit_weight(gen, 3, 24, 200, 64, true).to(d);
  return flat({ops::low_bit_matmul(at::randn({3, 200}, gen).to(d), weight)});
}

at::Tensor sampling_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t rows = 16;
  ops::SamplingTensors s;
  s.inv_temperature = at::full({rows}, 1 / 0.8).to(d);
  s.greedy = at::zeros({rows}, at::kBool).to(d);
  s.top_k = at::full({rows}, 20, at::kLong).to(d);
  s.top_p = at::full({rows}, 0.9, at::kDouble).to(d);
  s.min_p = at::zeros({rows}, at::kDouble).to(d);
  s.uniform = at::rand({rows}, gen, at::kDouble).to(d);
  const auto chosen = ops::sample_tokens((at::randn({rows, 300}, gen) * 3).to(d), s);
  return flat({chosen.token, chosen.logprob, chosen.tempered_logprob});
}

at::Tensor graphs_call(const c10::Device& d) {
  auto config = test::tiny_config(model::Family::kQwen3, /*tied=*/true);
  model::CausalLM model(config, at::TensorOptions(d));
  model::init_random(model, 6, 0.2);
  std::vector<generation::GenerationRequest> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt_ids = test::random_tokens(5 + static_cast<int64_t>(i), 7 + i);
    requests[i].params.temperature = 0;
    requests[i].params.max_new_tokens = 12;
  }
  generation::GenerationEngine engine(model, nullptr);
  std::vector<at::Tensor> tokens;
  for (const auto& r : engine.generate(requests))
    tokens.push_back(at::tensor(r.token_ids, at::kInt));
  return flat(tokens);
}

// Forward and backward of a norm in a training step: output and both gradients.
at::Tensor rms_norm_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  at::AutoGradMode enable(true);
  auto x = at::randn({3, 7, 40}, gen).to(d).requires_grad_();
  auto w = (1 + 0.1 * at::randn({40}, gen)).to(d).requires_grad_();
  auto y = ops::rms_norm(x, w, 1e-6);
  const auto grads = torch::autograd::grad({y}, {x, w}, {at::randn({3, 7, 40}, gen).to(d)});
  return flat({y.detach(), grads[0], grads[1]});
}

// The distillation loss's divergence per token and the student's gradient.
at::Tensor forward_kl_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::AutoGradMode enable(true);
  auto student = (2 * at::randn({5, 37}, gen)).to(d).requires_grad_();
  auto teacher = (2 * at::randn({5, 37}, gen)).to(d);
  auto kl = ops::forward_kl(student, teacher, 1.5);
  const auto grads = torch::autograd::grad({kl}, {student}, {at::rand({5}, gen).to(d)});
  return flat({kl.detach(), grads[0]});
}

// The MLP activation in training: output and both gradients.
at::Tensor swiglu_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  at::AutoGradMode enable(true);
  auto gate = (2 * at::randn({3, 5, 33}, gen)).to(d).requires_grad_();
  auto up = at::randn({3, 5, 33}, gen).to(d).requires_grad_();
  auto h = ops::swiglu(gate, up);
  const auto grads = torch::autograd::grad({h}, {gate, up}, {at::randn({3, 5, 33}, gen).to(d)});
  return flat({h.detach(), grads[0], grads[1]});
}

// The rotary embedding of keys in a training step: output and the gradient of x.
at::Tensor rotary_call(const c10::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  at::AutoGradMode enable(true);
  auto x = at::randn({2, 6, 3, 16}, gen).to(d).transpose(1, 2).requires_grad_();
  const auto angles = at::randn({2, 6, 16}, gen).to(d);
  auto y = ops::rotary(x, angles.cos(), angles.sin());
  const auto grads = torch::autograd::grad({y}, {x}, {at::randn({2, 3, 6, 16}, gen).to(d)});
  return flat({y.detach(), grads[0]});
}

std::function<at::Tensor(const c10::Device&)> call_of(Kernel kernel) {
  switch (kernel) {
    case Kernel::kFakeQuant:
      return fake_quant_call;
    case Kernel::kFusedAttention:
      return attention_call;
    case Kernel::kPagedDecodeAttention:
      return paged_decode_call;
    case Kernel::kLowBitMatmul:
      return low_bit_call;
    case Kernel::kTokenSampling:
      return sampling_call;
    case Kernel::kCudaGraphs:
      return graphs_call;
    case Kernel::kRmsNorm:
      return rms_norm_call;
    case Kernel::kForwardKl:
      return forward_kl_call;
    case Kernel::kSwiglu:
      return swiglu_call;
    case Kernel::kRotary:
      return rotary_call;
    case Kernel::kCount:
      break;
  }
  FAIL("no call for this kernel");
  return {};
}

// Runs body with std::cerr captured; returns what it printed.
std::string stderr_of(const std::function<void()>& body) {
  std::ostringstream captured;
  auto* previous = std::cerr.rdbuf(captured.rdbuf());
  try {
    body();
  } catch (...) {
    std::cerr.rdbuf(previous);
    throw;
  }
  std::cerr.rdbuf(previous);
  return captured.str();
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The process's record of `kernel` on `device` (kernel_choices_json), or null.
io::Json record_of(Kernel kernel, const c10::Device& device) {
  const io::Json choices = ops::kernel_choices_json();  // alive while its entries are read
  for (const auto& entry : choices["used"])
    if (entry["kernel"] == std::string(enum_name(kernel)) && entry["device"] == device.str())
      return entry;
  return nullptr;
}

// A clean registry in `mode` for the duration of a test section.
struct FreshChoices {
  explicit FreshChoices(KernelMode mode) {
    ops::reset_kernel_choices();
    ops::set_kernel_mode(mode);
  }
  ~FreshChoices() { ops::reset_kernel_choices(); }
};

}  // namespace

TEST_CASE("every custom kernel passes its self-check on every device here", "[kernels]") {
  FreshChoices fresh(KernelMode::kAuto);
  for (const auto& device : devices()) {
    for (const Kernel kernel : kernels_on(device)) {
      if (kernel == Kernel::kCudaGraphs) continue;  // checked by the engine (below)
      INFO(enum_name(kernel) << " on " << device.str());
      const auto check = ops::run_kernel_self_check(kernel, device);
      REQUIRE(check);
      INFO(check->summary());
      CHECK(check->passed);
      CHECK(check->cases >= 3);
      CHECK(check->failure.empty());
      CHECK(check->seconds < 1.0);  // "well under a second"
    }
  }
}

TEST_CASE("a fault just over a kernel's tolerance fails its self-check", "[kernels]") {
  for (const auto& device : devices()) {
    for (const Kernel kernel : kernels_on(device)) {
      if (kernel == Kernel::kCudaGraphs) continue;
      INFO(enum_name(kernel) << " on " << device.str());
      FreshChoices fresh(KernelMode::kAuto);
      ops::set_kernel_fault(kernel, true);
      const auto check = ops::run_kernel_self_check(kernel, device);
      REQUIRE(check);
      INFO(check->summary());
      CHECK_FALSE(check->passed);
      CHECK(check->failure.empty());
      CHECK(check->worst_error > check->tolerance);
      // Just over: a perturbation of twice the tolerance (plus a few ulp), not a wreck. Exact
      // kernels (tolerance 0) and sampling (a moved token) have no such scale.
      if (check->tolerance > 0 && kernel != Kernel::kTokenSampling)
        CHECK(check->worst_error < 5 * check->tolerance);
    }
  }
}

TEST_CASE("through the dispatchers: auto uses a checked kernel, falls back from a faulty one",
          "[kernels]") {
  for (const auto& device : devices()) {
    for (const Kernel kernel : kernels_on(device)) {
      const auto call = call_of(kernel);
      const std::string name(enum_name(kernel));
      INFO(name << " on " << device.str());
      at::Tensor reference, custom;
      {
        FreshChoices fresh(KernelMode::kReference);
        reference = call(device);
        const auto record = record_of(kernel, device);
        REQUIRE_FALSE(record.is_null());
        CHECK(record["path"] == "reference");
        CHECK(record["why"] == "--kernels reference");
      }
      {
        FreshChoices fresh(KernelMode::kCustom);
        custom = call(device);
        CHECK(record_of(kernel, device)["path"] == "custom");
      }
      {
        INFO("no fault: auto picks the custom kernel, after a passed self-check");
        FreshChoices fresh(KernelMode::kAuto);
        const std::string warnings =
            stderr_of([&] { CHECK(test::same_bits(call(device), custom)); });
        CHECK(warnings.find("warning") == std::string::npos);
        const auto record = record_of(kernel, device);
        CHECK(record["path"] == "custom");
        CHECK(record["custom_calls"].get<int64_t>() >= 1);
        CHECK(record["reference_calls"] == 0);
        CHECK(record["why"].get<std::string>().starts_with("self-check passed"));
      }
      {
        INFO("a fault: auto warns once and gives the twin's results bit for bit");
        FreshChoices fresh(KernelMode::kAuto);
        ops::set_kernel_fault(kernel, true);
        const std::string warnings = stderr_of([&] {
          CHECK(test::same_bits(call(device), reference));
          // A second use: no second check or warning.
          CHECK(test::same_bits(call(device), reference));
        });
        INFO(warnings);
        const std::string warning = "rqat: warning: kernel " + name + " failed its self-check on " +
                                    ops::device_description(device);
        CHECK(count_of(warnings, warning) == 1);
        CHECK(count_of(warnings, "\n") == 1);  // the warning is one line, and the only one
        CHECK(warnings.find("tolerance") != std::string::npos);
        const auto record = record_of(kernel, device);
        CHECK(record["path"] == "reference");
        CHECK(record["why"].get<std::string>().starts_with("self-check failed"));
      }
      {
        INFO("a fault in custom mode: the perturbed output is used");
        FreshChoices fresh(KernelMode::kCustom);
        ops::set_kernel_fault(kernel, true);
        CHECK_FALSE(test::same_bits(call(device), reference));
        CHECK_FALSE(test::same_bits(call(device), custom));
      }
    }
  }
}

TEST_CASE("a self-check draws from its own generator, outside inference mode and autocast",
          "[kernels]") {
  FreshChoices fresh(KernelMode::kAuto);
  at::manual_seed(123);
  const auto undisturbed = at::randn({4});
  at::manual_seed(123);
  {
    // As the generation engine first uses a kernel: inside InferenceMode (and under autocast, as
    // a bf16 trainer would): the check still compares float32 and float64 results and passes.
    c10::InferenceMode inference;
    at::autocast::set_autocast_enabled(at::kCPU, true);
    for (const Kernel kernel : kernels_on(c10::kCPU)) {
      INFO(enum_name(kernel));
      CHECK(ops::use_custom_kernel(kernel, c10::kCPU));
    }
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  CHECK(at::equal(at::randn({4}), undisturbed));
  const io::Json choices = ops::kernel_choices_json();
  for (const auto& entry : choices["used"]) {
    INFO(entry.dump());
    CHECK(entry["check"]["passed"] == true);
  }
}

TEST_CASE("the mode and faults come from the environment; bad values are one-line errors",
          "[kernels]") {
  setenv("RQAT_KERNELS", "reference", 1);
  ops::reset_kernel_choices();
  CHECK(ops::kernel_mode() == KernelMode::kReference);
  CHECK_FALSE(ops::use_custom_kernel(Kernel::kLowBitMatmul, c10::kCPU));
  setenv("RQAT_KERNELS", "fast", 1);
  test::require_error([] { ops::kernel_mode_from_environment(); },
                      {"RQAT_KERNELS", "fast", "auto", "custom", "reference"});
  unsetenv("RQAT_KERNELS");

  setenv("RQAT_TEST_KERNEL_FAULT", "low_bit_matmul,fused_attention", 1);
  ops::reset_kernel_choices();
  CHECK(ops::kernel_fault(Kernel::kLowBitMatmul));
  CHECK(ops::kernel_fault(Kernel::kFusedAttention));
  CHECK_FALSE(ops::kernel_fault(Kernel::kFakeQuant));
  setenv("RQAT_TEST_KERNEL_FAULT", "all", 1);
  ops::reset_kernel_choices();
  CHECK(ops::kernel_fault(Kernel::kFakeQuant));
  CHECK(ops::kernel_fault(Kernel::kCudaGraphs));
  setenv("RQAT_TEST_KERNEL_FAULT", "low_bit", 1);
  test::require_error([] { ops::reset_kernel_choices(); },
                      {"RQAT_TEST_KERNEL_FAULT", "low_bit", "low_bit_matmul"});
  unsetenv("RQAT_TEST_KERNEL_FAULT");
  ops::reset_kernel_choices();
  CHECK(ops::kernel_mode() == KernelMode::kAuto);
  CHECK_FALSE(ops::kernel_fault(Kernel::kLowBitMatmul));
}

TEST_CASE("the fault hook moves an output by just over the tolerance in the kernel's measure",
          "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const auto out = at::randn({50}, gen);
  const auto scale = at::rand({50}, gen) + 0.5;
  auto perturbed = out.clone();
  ops::perturb_kernel_output(perturbed, 1e-5, scale);
  const auto error = ((perturbed - out).abs() / scale).to(at::kDouble);
  CHECK(error.min().item<double>() > 1e-5);
  CHECK(error.max().item<double>() < 3e-5);
  // Tolerance 0: a few ulp of every element, zeros included.
  auto exact = at::zeros({3});
  exact[1] = 1.0;
  ops::perturb_kernel_output(exact, 0, at::Tensor());
  CHECK((exact != at::tensor({0.0f, 1.0f, 0.0f})).all().item<bool>());
  CHECK(std::abs(exact[1].item<float>() - 1.0f) < 1e-6);
  auto half = at::ones({2}, at::kBFloat16);
  ops::perturb_kernel_output(half, 0, at::Tensor());
  CHECK((half.to(at::kFloat) != 1.0f).all().item<bool>());
}
