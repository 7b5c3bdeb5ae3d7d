// How many KV blocks a generation run gets: an explicit budget in GiB on any device, or by default
// what the run can use at most (the engine asks for max_batch sequences of its longest request and
// one kept prompt), on CUDA capped by a
// fraction of the memory free once the weights are loaded (as vLLM's gpu_memory_utilization).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "model/model_config.h"

namespace rqat::generation {

struct KVBudget {
  double gb = 0;  // explicit budget in GiB (0: default)
  double gpu_memory_fraction = 0.9;
  int64_t block_size = 16;
};

// Usable blocks (block 0, reserved for padding, not counted) for a run that could use up to
// `wanted_blocks`. Errors name --kv-cache-gb when an explicit budget holds not even one block.
int64_t kv_pool_blocks(const model::ModelConfig& config, at::ScalarType dtype, c10::Device device,
                       const KVBudget& budget, int64_t wanted_blocks);

// Bytes free on a CUDA device (0 on other devices or in a build without CUDA).
int64_t cuda_free_bytes(c10::Device device);

}  // namespace rqat::generation
