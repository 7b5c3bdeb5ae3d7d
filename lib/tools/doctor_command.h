// rqat doctor: what a user attaches to a bug report, and what scripts/gpu-check runs first. On one
// device it reports the environment (GPU, driver, CUDA runtime, torch and its CUDA, NCCL, free
// memory, rqat's revision), runs every custom kernel's self-check against its PyTorch twin
// (ops/kernel_choice.h) with its verdict and worst error, times each custom kernel against its
// twin (does rqat's own path pay on this GPU?), and runs an all-reduce across the visible GPUs.
// Without a GPU the same checks run on the CPU paths, and the report says so. Markdown.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <iosfwd>

namespace rqat::tools {

struct DoctorOptions {
  c10::Device device = c10::kCPU;
  std::filesystem::path report;  // also written here when set (atomically)
  bool timing = true;            // time each custom kernel against its twin
};

// Prints the report to `out`; true when every check passed (the tool then exits 0, else 1).
bool run_doctor_command(const DoctorOptions& options, std::ostream& out);

}  // namespace rqat::tools
