// rqat doctor's timing of each custom kernel against its PyTorch twin on one device (and of a
// decode step replayed from a CUDA graph against the eager step): whether rqat's own path pays on
// this machine. A few hundred milliseconds per kernel; shapes of a Qwen3-0.6B-sized layer on a
// GPU, smaller on a CPU.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "ops/kernel_choice.h"

namespace rqat::tools {

struct KernelTiming {
  ops::Kernel kernel;
  std::string shape;  // what was timed
  double custom_ms = 0, twin_ms = 0;
  std::string error;  // set when a path threw (the timing is then missing)
};

// Every kernel with a custom implementation on `device` (ops::custom_kernel_exists).
std::vector<KernelTiming> time_kernels(const c10::Device& device);

// Milliseconds per call of `body` on `device`: one untimed call, then as many as fill about
// 0.2 s (3 to 200), the device synchronized before and after.
double milliseconds_per_call(const c10::Device& device, const std::function<void()>& body);

}  // namespace rqat::tools
