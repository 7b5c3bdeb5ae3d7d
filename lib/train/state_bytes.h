// Per-rank bytes of training state by kind, as the trainers measure them at the first update
// (train/trainer.h) and the memory plan predicts them (train/memory_plan.h).
#pragma once

#include <cstdint>
#include <string>

#include "io/json_file.h"

namespace rqat::train {

// Tensor bytes, not allocator reservations.
struct StateBytes {
  int64_t weights = 0;    // the module's parameters (compute copies)
  int64_t gradients = 0;  // the module's .grad tensors and the fp32 gradient slices
  int64_t master = 0;     // fp32 master slices (sharded modes)
  int64_t moments = 0;    // AdamW exp_avg and exp_avg_sq
  int64_t total() const { return weights + gradients + master + moments; }
};

io::Json state_bytes_json(const StateBytes& bytes);
std::string format_state_bytes(const StateBytes& bytes);  // "weights 1.20 MiB, gradients ..."

}  // namespace rqat::train
