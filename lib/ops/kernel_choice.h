// Which implementation each of rqat's own kernels runs: the custom kernel, or its twin built only
// from PyTorch's operators (matmul/cuBLAS, SDPA, gather and elementwise ops), which runs on any
// device with PyTorch's tested kernels. No line of a custom kernel may decide a result unchecked
// on a device it has never run on, so in the default mode a process checks each custom kernel on
// each device the first time it is about to use it:
//
//   auto       (default) the first use of kernel K on device D runs K and its twin on a few
//              awkward shapes on D (ops/kernel_self_checks.h) and compares them within the
//              tolerance K's test states; K runs only if it agreed. Otherwise one warning line
//              (kernel, device, compute capability, worst error) and the twin for the rest of the
//              process. Once per process, kernel and device; well under a second each.
//   custom     the custom kernel wherever it takes the operands, unchecked (benchmarks, debugging);
//   reference  the twins everywhere (what to compare a suspicious result with).
//
// The mode is one runtime option (cli/runtime_flags.h: --kernels), defaulting to $RQAT_KERNELS
// when set (so a whole test suite runs in one mode), else auto. Every use is recorded: the
// manifest of every stage lists which path each kernel took on which device and why
// (kernel_choices_json). A test-only fault hook perturbs a kernel's output by just over its
// tolerance, to show that the check catches it and that the hook reaches the kernel.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>

#include "io/enum_names.h"
#include "io/json_file.h"

namespace at {
class Tensor;
}

namespace rqat::ops {

enum class KernelMode { kAuto, kCustom, kReference, kCount };
constexpr EnumNames<KernelMode> enum_names(KernelMode) { return {"auto", "custom", "reference"}; }

// Every path on which rqat runs its own kernels instead of PyTorch's.
enum class Kernel {
  kFakeQuant,             // fake-quant forward and STE backward (CPU loops, CUDA kernels)
  kFusedAttention,        // sequence attention forward/backward (CPU kernels; twin: SDPA)
  kPagedDecodeAttention,  // decode attention over the paged KV cache (CUDA)
  kLowBitMatmul,          // y = x W^T from packed 2-8 bit codes (CPU kernel, CUDA GEMV)
  kTokenSampling,         // token choice on the logits' device (CPU kernel; twin: a sort per row)
  kCudaGraphs,            // the decode step replayed from a CUDA graph (twin: the eager step)
  kRmsNorm,               // RMSNorm forward/backward (CPU loops, CUDA: PyTorch's fused kernels)
  kForwardKl,             // the distillation loss's KL per token, forward/backward (CPU loops)
  kSwiglu,                // the MLP's silu(gate) * up in training, forward/backward (CPU loops)
  kRotary,                // rotary embedding of q and k, forward/backward (CPU loops, bit-exact)
  kCount
};
constexpr EnumNames<Kernel> enum_names(Kernel) {
  return {"fake_quant",     "fused_attention", "paged_decode_attention",
          "low_bit_matmul", "token_sampling",  "cuda_graphs",
          "rms_norm",       "forward_kl",      "swiglu",
          "rotary"};
}

// What a self-check found. The error of a case is max |custom - twin| / scale over its elements
// (the measure the kernel's test uses); the check passes when every case is within its tolerance.
struct KernelCheck {
  bool passed = true;
  int cases = 0;
  double worst_error = 0;  // of the case nearest to (or furthest past) its tolerance
  double tolerance = 0;    // that case's tolerance
  std::string worst_case;  // its name
  std::string failure;     // set when the kernel threw instead of returning
  double seconds = 0;
  // "worst error 3.1e-07 <= 1e-05 (case ...), 24 cases, 0.08 s", or what failed.
  std::string summary() const;
};

KernelMode kernel_mode();
void set_kernel_mode(KernelMode mode);
// $RQAT_KERNELS (auto, custom or reference; an unknown name fails naming the variable), else auto.
KernelMode kernel_mode_from_environment();

// Whether rqat has its own implementation of `kernel` for devices of this type (in this build).
bool custom_kernel_exists(Kernel kernel, const c10::Device& device);

// The decision at a call site that is about to run `kernel` on `device` (operands the custom
// kernel takes): true to run the custom kernel, false for its twin. Counts the call. In auto
// mode the first call per device runs the self-check; inside a CUDA graph capture that found no
// verdict yet it answers false without checking (a check cannot run during capture).
bool use_custom_kernel(Kernel kernel, const c10::Device& device);

// The self-check of `kernel` on `device`, run now (nothing cached): the cases of
// ops/kernel_self_checks.h. nullopt for cuda_graphs (its caller compares the replayed step with
// the eager one and reports through record_kernel_check) and where no custom kernel exists.
std::optional<KernelCheck> run_kernel_self_check(Kernel kernel, const c10::Device& device);

// A verdict that a caller established itself (the decode graphs' replay against the eager step,
// or a capture that threw). In auto mode a failed one warns and switches the kernel off on that
// device, and the call that waited for it counts as the twin's.
void record_kernel_check(Kernel kernel, const c10::Device& device, const KernelCheck& check);

// The device as a user names it in a bug report: "cpu (Intel(R) Xeon(R) ...)" or
// "cuda:0 (NVIDIA H200, compute capability 9.0)".
std::string device_description(const c10::Device& device);

// What this process chose so far: {"mode": ..., "low_bit_activations": "float" | "int8" (the
// packed CPU kernels' arithmetic, ops/low_bit_matmul.h), "cpu_target": their instruction set
// (ops/cpu_target.h), "used": [{"kernel", "device", "path",
// "why", "custom_calls", "reference_calls"}, ...]}, for manifests and rqat doctor.
io::Json kernel_choices_json();

// --- Test hook. A fault (set here, or listed in $RQAT_TEST_KERNEL_FAULT: kernel names separated by
// commas, or "all") makes the kernel's custom implementation perturb its output by just over its
// tolerance (perturb_kernel_output), in self-checks and in real calls alike.
bool kernel_fault(Kernel kernel);
void set_kernel_fault(Kernel kernel, bool armed);
// Adds 2 * tolerance * scale to every element of `out` (scale: a tensor broadcastable to out, or
// undefined for 1): an error just over `tolerance` in the kernel's own measure. A tolerance of 0
// means bit-exact: then 4 ulp of each element plus the dtype's smallest normal.
void perturb_kernel_output(at::Tensor& out, double tolerance, const at::Tensor& scale);
// The hook of a kernel whose check measures errors against its largest output entry: with a fault
// armed for `kernel`, a copy of `out` moved by just over `tolerance` of that entry; else `out`
// itself (what a kernel saved for its backward stays the true output).
at::Tensor perturbed_if_faulty(Kernel kernel, const at::Tensor& out, double tolerance);

// Tests: forget every verdict, record and armed fault, and take the mode from the environment.
void reset_kernel_choices();

}  // namespace rqat::ops
