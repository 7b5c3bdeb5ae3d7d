// See kernel_choice.h. One process-wide table of (kernel, device) choices behind a mutex: a call
// site asks once per call (a lock and a lookup, nothing next to a kernel launch); the self-check
// runs under the lock, so two threads never check the same kernel twice.
#include "ops/kernel_choice.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <string_view>
#include <vector>

#include "io/error.h"
#include "ops/cpu_target.h"
#include "ops/forward_kl.h"
#include "ops/kernel_self_checks.h"
#include "ops/low_bit_matmul.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"

#ifdef RQAT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace rqat::ops {

namespace {

constexpr size_t kKernels = static_cast<size_t>(Kernel::kCount);

struct Choice {
  Kernel kernel;
  c10::Device device;
  std::optional<bool> custom_ok;  // auto: the verdict, once known
  std::optional<KernelCheck> check;
  std::string why;
  int64_t custom_calls = 0, reference_calls = 0;
};

struct Registry {
  std::recursive_mutex mutex;
  std::optional<KernelMode> mode;  // unset: from the environment at first use
  // In order of first use; a deque, so that a Choice& stays valid while a self-check run under it
  // asks for another kernel (a vector's push_back would move every Choice).
  std::deque<Choice> choices;
  std::array<std::atomic<bool>, kKernels> faults{};
  std::once_flag faults_from_environment;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Arms the faults $RQAT_TEST_KERNEL_FAULT lists.
void read_fault_environment(Registry& r) {
  const char* list = std::getenv("RQAT_TEST_KERNEL_FAULT");
  if (list == nullptr) return;
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (name == "all") {
      for (auto& f : r.faults) f = true;
    } else if (!name.empty()) {
      r.faults[static_cast<size_t>(parse_enum<Kernel>(name, "RQAT_TEST_KERNEL_FAULT"))] = true;
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

Choice& choice_of(Registry& r, Kernel kernel, const c10::Device& device) {
  for (Choice& c : r.choices)
    if (c.kernel == kernel && c.device == device) return c;
  r.choices.push_back(Choice{kernel, device, std::nullopt, std::nullopt, "", 0, 0});
  return r.choices.back();
}

KernelMode mode_of(Registry& r) {
  if (!r.mode) r.mode = kernel_mode_from_environment();
  return *r.mode;
}

bool capturing_graph(const c10::Device& device) {
#ifdef RQAT_WITH_CUDA
  return device.is_cuda() &&
         c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
  (void)device;
  return false;
#endif
}

void warn_failed(Kernel kernel, const c10::Device& device, const KernelCheck& check) {
  std::cerr << fmt::format(
      "rqat: warning: kernel {} failed its self-check on {}: {}; using its PyTorch twin for the "
      "rest of this process (rqat doctor reports; --kernels custom forces the kernel)\n",
      enum_name(kernel), device_description(device), check.summary());
}

// Takes a verdict for an auto-mode choice.
void settle(Choice& c, const KernelCheck& check) {
  c.check = check;
  c.custom_ok = check.passed;
  c.why = (check.passed ? "self-check passed: " : "self-check failed: ") + check.summary();
  if (!check.passed) warn_failed(c.kernel, c.device, check);
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "";
}

std::string path_of(const Choice& c) {
  if (c.custom_calls > 0 && c.reference_calls > 0) return "custom, then reference";
  return c.custom_calls > 0 ? "custom" : "reference";
}

}  // namespace

std::string KernelCheck::summary() const {
  if (!failure.empty())
    return fmt::format("the kernel threw in case '{}': {} ({} cases, {:.2f} s)", worst_case,
                       failure, cases, seconds);
  if (worst_error == 0 && tolerance == 0)
    return fmt::format("bit-exact over {} cases ({:.2f} s)", cases, seconds);
  return fmt::format("worst error {:.2g} {} tolerance {:.2g} (case '{}'), {} cases, {:.2f} s",
                     worst_error, passed ? "<=" : ">", tolerance, worst_case, cases, seconds);
}

KernelMode kernel_mode_from_environment() {
  const char* value = std::getenv("RQAT_KERNELS");
  if (value == nullptr || *value == '\0') return KernelMode::kAuto;
  return parse_enum<KernelMode>(value, "RQAT_KERNELS");
}

KernelMode kernel_mode() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return mode_of(r);
}

void set_kernel_mode(KernelMode mode) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.mode = mode;
}

bool custom_kernel_exists(Kernel kernel, const c10::Device& device) {
  switch (kernel) {
    case Kernel::kFakeQuant:
    case Kernel::kLowBitMatmul:
#ifdef RQAT_WITH_CUDA
      return device.is_cpu() || device.is_cuda();
#else
      return device.is_cpu();
#endif
    case Kernel::kFusedAttention:
    case Kernel::kTokenSampling:
      return device.is_cpu();
    case Kernel::kRmsNorm:
      return fused_rms_norm_exists(device);
    case Kernel::kForwardKl:
      return fused_forward_kl_exists(device);
    case Kernel::kSwiglu:
      return fused_swiglu_exists(device);
    case Kernel::kRotary:
      return fused_rotary_exists(device);
    case Kernel::kPagedDecodeAttention:
    case Kernel::kCudaGraphs:
#ifdef RQAT_WITH_CUDA
      return device.is_cuda();
#else
      return false;
#endif
    case Kernel::kCount:
      break;
  }
  return false;
}

bool use_custom_kernel(Kernel kernel, const c10::Device& device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Choice& c = choice_of(r, kernel, device);
  bool custom = false;
  switch (mode_of(r)) {
    case KernelMode::kReference:
      c.why = "--kernels reference";
      break;
    case KernelMode::kCustom:
      c.why = "--kernels custom (not self-checked)";
      custom = true;
      break;
    case KernelMode::kAuto:
    case KernelMode::kCount:
      if (!c.custom_ok) {
        if (capturing_graph(device)) {
          c.why = "asked inside a CUDA graph capture before its self-check ran";
          break;
        }
        if (const auto check = run_kernel_self_check(kernel, device)) {
          settle(c, *check);
        } else {  // checked by the caller at first use (the decode graphs)
          c.why = "checked against the eager step at first use";
          ++c.custom_calls;
          return true;
        }
      }
      custom = *c.custom_ok;
      break;
  }
  ++(custom ? c.custom_calls : c.reference_calls);
  return custom;
}

std::optional<KernelCheck> run_kernel_self_check(Kernel kernel, const c10::Device& device) {
  if (!custom_kernel_exists(kernel, device)) return std::nullopt;
  const c10::DeviceGuard on_device(device);  // the check's ATen calls and launches on `device`
  switch (kernel) {
    case Kernel::kFakeQuant:
      return check_fake_quant(device);
    case Kernel::kFusedAttention:
      return check_fused_attention(device);
    case Kernel::kPagedDecodeAttention:
      return check_paged_decode_attention(device);
    case Kernel::kLowBitMatmul:
      return check_low_bit_matmul(device);
    case Kernel::kTokenSampling:
      return check_token_sampling(device);
    case Kernel::kRmsNorm:
      return check_rms_norm(device);
    case Kernel::kForwardKl:
      return check_forward_kl(device);
    case Kernel::kSwiglu:
      return check_swiglu(device);
    case Kernel::kRotary:
      return check_rotary(device);
    case Kernel::kCudaGraphs:
    case Kernel::kCount:
      break;
  }
  return std::nullopt;
}

void record_kernel_check(Kernel kernel, const c10::Device& device, const KernelCheck& check) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Choice& c = choice_of(r, kernel, device);
  if (mode_of(r) != KernelMode::kAuto) return;
  // The call that was waiting for this verdict (use_custom_kernel counted it custom) went to the
  // twin when the check failed there.
  if (!check.passed && c.custom_ok != false && c.custom_calls > 0) {
    --c.custom_calls;
    ++c.reference_calls;
  }
  settle(c, check);
}

std::string device_description(const c10::Device& device) {
  if (device.is_cpu()) {
    static const std::string model = cpu_model_name();
    return model.empty() ? "cpu" : fmt::format("cpu ({})", model);
  }
#ifdef RQAT_WITH_CUDA
  if (device.is_cuda()) {
    const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
    return fmt::format("cuda:{} ({}, compute capability {}.{})", index, p->name, p->major,
                       p->minor);
  }
#endif
  return device.str();
}

io::Json kernel_choices_json() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  io::Json used = io::Json::array();
  for (const Choice& c : r.choices) {
    io::Json entry = {{"kernel", std::string(enum_name(c.kernel))},
                      {"device", c.device.str()},
                      {"path", path_of(c)},
                      {"why", c.why},
                      {"custom_calls", c.custom_calls},
                      {"reference_calls", c.reference_calls}};
    if (c.check) {
      entry["check"] = {{"passed", c.check->passed},       {"worst_error", c.check->worst_error},
                        {"tolerance", c.check->tolerance}, {"worst_case", c.check->worst_case},
                        {"cases", c.check->cases},         {"seconds", c.check->seconds}};
    }
    used.push_back(std::move(entry));
  }
  return {{"mode", std::string(enum_name(mode_of(r)))},
          {"low_bit_activations", std::string(enum_name(low_bit_activations()))},
          {"cpu_target", std::string(enum_name(cpu_target()))},
          {"used", std::move(used)}};
}

bool kernel_fault(Kernel kernel) {
  Registry& r = registry();
  std::call_once(r.faults_from_environment, [&r] { read_fault_environment(r); });
  return r.faults[static_cast<size_t>(kernel)].load(std::memory_order_relaxed);
}

void set_kernel_fault(Kernel kernel, bool armed) {
  Registry& r = registry();
  std::call_once(r.faults_from_environment, [&r] { read_fault_environment(r); });
  r.faults[static_cast<size_t>(kernel)] = armed;
}

void perturb_kernel_output(at::Tensor& out, double tolerance, const at::Tensor& scale) {
  at::NoGradGuard no_grad;
  const auto wide = out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor value = out.to(wide);
  at::Tensor delta;
  if (tolerance > 0) {
    // Twice the tolerance in the kernel's own measure; rounding the sum to a 16-bit output moves
    // it by at most half a unit in the last place, less than the tolerance of such outputs.
    delta = (scale.defined() ? scale.to(out.device(), wide) : at::ones({}, value.options())) *
            (2 * tolerance);
  } else {
    // A bit-exact kernel: a few units in the last place of the output's dtype, zeros included.
    double ulp = std::numeric_limits<float>::epsilon(), tiny = std::numeric_limits<float>::min();
    if (out.scalar_type() == at::kBFloat16) {
      ulp = std::numeric_limits<c10::BFloat16>::epsilon();
    } else if (out.scalar_type() == at::kHalf) {
      ulp = std::numeric_limits<c10::Half>::epsilon();
      tiny = std::numeric_limits<c10::Half>::min();
    } else if (out.scalar_type() == at::kDouble) {
      ulp = std::numeric_limits<double>::epsilon();
      tiny = std::numeric_limits<double>::min();
    }
    delta = value.abs() * (4 * ulp) + tiny;
  }
  out.copy_(value + delta);  // one rounding to the output's dtype
}

at::Tensor perturbed_if_faulty(Kernel kernel, const at::Tensor& out, double tolerance) {
  if (!kernel_fault(kernel)) return out;
  at::Tensor perturbed = out.clone();
  perturb_kernel_output(perturbed, tolerance, out.abs().max());
  return perturbed;
}

void reset_kernel_choices() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.choices.clear();
  r.mode.reset();
  std::call_once(r.faults_from_environment, [] {});
  for (auto& f : r.faults) f = false;
  read_fault_environment(r);
}

}  // namespace rqat::ops
