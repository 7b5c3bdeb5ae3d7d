// Flags every tool shares: --dtype and --device, parsed into a dtype and a device.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>
#include <CLI/CLI.hpp>

#include <string>

namespace rqat::cli {

struct RuntimeFlags {
  std::string dtype = "auto";   // f32 | bf16 | auto (bf16 on CUDA, f32 on the CPU)
  std::string device = "auto";  // cpu | cuda | cuda:N | auto (cuda when available)
  int threads = 0;              // CPU threads for intra-op parallelism (0: library default)
  bool dequantize = false;      // GPTQ checkpoints: dequantize at load instead of packed kernels

  c10::Device resolved_device() const;
  at::ScalarType resolved_dtype() const;  // needs the device for "auto"
  void apply_threads() const;
};

// --dtype, --device, --threads, --dequantize; also makes CLI11's parse errors one line ("TOOL: error: ...").
void add_runtime_flags(CLI::App& app, RuntimeFlags& flags);

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
