// rqat doctor's collective check: an all-reduce across the visible GPUs (NCCL, one thread per
// GPU in this process) or, without a GPU, across two Gloo ranks on the CPU: the sum must be exact,
// and its time gives the bus bandwidth (2 (W - 1) / W x bytes / time, as nccl-tests reports it).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace rqat::tools {

struct AllReduceCheck {
  std::string backend;  // "nccl" or "gloo"
  int ranks = 0;
  int64_t elements = 0;  // float32 per rank
  bool skipped = false;  // one GPU: nothing to reduce across
  bool passed = false;
  double ms = 0, bus_gbps = 0;
  std::string detail;  // why it failed or was skipped
};

AllReduceCheck check_all_reduce(const c10::Device& device);

}  // namespace rqat::tools
