// Flags every tool shares: --dtype, --device, --threads, --dequantize, --low-bit-activations and
// --kernels, declared once (io/options.h) and parsed into a dtype, a device and the process's
// kernel choices.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>
#include <CLI/CLI.hpp>

#include <string>

#include "cli/option_flags.h"
#include "io/options.h"
#include "ops/kernel_choice.h"
#include "ops/low_bit_matmul.h"

namespace rqat::cli {

struct RuntimeFlags {
  std::string dtype = "auto";   // f32 | bf16 | auto (bf16 on CUDA, f32 on the CPU)
  std::string device = "auto";  // cpu | cuda | cuda:N | auto (cuda when available)
  int threads = 0;              // CPU threads for intra-op parallelism (0: library default)
  bool dequantize = false;      // GPTQ checkpoints: dequantize at load instead of packed kernels
  // What the packed CPU kernels multiply 2-4 bit codes with (ops/low_bit_matmul.h).
  ops::LowBitActivations low_bit_activations = ops::LowBitActivations::kFloat;
  // rqat's own kernels or their PyTorch twins (ops/kernel_choice.h); default $RQAT_KERNELS.
  ops::KernelMode kernels = environment_kernel_mode();

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.dtype, "dtype", "Compute dtype: f32, bf16 or auto (bf16 on CUDA, f32 on CPU)");
    // A resumed run may continue on another device (a requeued job lands where it lands).
    v.value(self.device, "device", "Device: cpu, cuda, cuda:N or auto", Role::kRunControl);
    v.value(self.threads, "threads", "CPU threads (0: all cores)", Role::kRunControl);
    v.value(self.dequantize, "dequantize",
            "GPTQ checkpoints: dequantize the quantized layers at load (default: compute from the "
            "packed low-bit weights)");
    v.value(self.low_bit_activations, "low-bit-activations",
            "Packed 2-4 bit layers on the CPU: float (x as it is, exact to float32 rounding) or "
            "int8 (x rounded to 8 bits per block of 32, then integer dot products as llama.cpp "
            "does: faster decode, slightly different numbers)");
    v.value(self.kernels, "kernels",
            "rqat's own kernels: auto (each checked against its PyTorch twin on the device at "
            "first use, the twin where it disagrees), custom (unchecked) or reference (PyTorch's "
            "operators only); default $RQAT_KERNELS, else auto",
            Role::kRunControl);
  }

  c10::Device resolved_device() const;
  at::ScalarType resolved_dtype() const;  // needs the device for "auto"
  // The CPU threads and the kernel mode for the process (fails naming RQAT_KERNELS when it holds
  // an unknown mode).
  void apply() const;

 private:
  // $RQAT_KERNELS when it names a mode, else auto (apply() reports a bad value in one line).
  static ops::KernelMode environment_kernel_mode();
};

// Makes CLI11's parse errors one line ("TOOL: error: ...", as run_tool's).
void one_line_parse_errors(CLI::App& app);

// The flags of RuntimeFlags, with one-line parse errors.
void add_runtime_flags(CLI::App& app, RuntimeFlags& flags);

// The flags of a tool's configuration (cli/*_config.h), with one-line parse errors.
template <class Config>
void add_config_flags(CLI::App& app, Config& config) {
  one_line_parse_errors(app);
  add_option_flags(app, config);
}

// Makes every allocation of 1 MiB or more a separate mapping that returns to the system when
// freed. glibc otherwise raises its mmap threshold after the first large frees and serves later
// tensors from the heap, which it keeps: quantizing a model layer by layer then peaked at the
// model plus twice its quantized layers (measured by scripts/bench_ptq_memory) instead of the
// model plus one block's activations. For tools that allocate and free many large tensors once.
void return_large_allocations_to_system();

// Runs a tool's body, printing rqat::Error (and other exceptions) as one line; returns the exit
// code.
int run_tool(const char* tool, const std::function<void()>& body);

}  // namespace rqat::cli
