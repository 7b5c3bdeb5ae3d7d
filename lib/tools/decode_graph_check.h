// rqat doctor's check of CUDA-graph decoding (ops::Kernel::kCudaGraphs, whose twin is the eager
// step): a small random Qwen3-shaped model on the device decodes greedily once eagerly and once
// from graphs replayed unchecked (--kernels custom for that run), and every token must agree; the
// time per decode step of both is the timing.
#pragma once

#include <c10/core/Device.h>

#include "ops/kernel_choice.h"
#include "tools/kernel_timing.h"

namespace rqat::tools {

struct DecodeGraphCheck {
  ops::KernelCheck check;
  KernelTiming timing;
};

// A CUDA device; the process's kernel mode is restored afterwards.
DecodeGraphCheck check_decode_graphs(const c10::Device& device);

}  // namespace rqat::tools
