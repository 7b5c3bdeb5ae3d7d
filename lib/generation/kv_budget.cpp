// See kv_budget.h.
#include "generation/kv_budget.h"

#include <algorithm>
#include <cmath>

#include "io/error.h"
#include "model/paged_kv_cache.h"

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace rqat::generation {

int64_t cuda_free_bytes(c10::Device device) {
#ifdef RQAT_WITH_CUDA
  if (!device.is_cuda()) return 0;
  c10::cuda::CUDAGuard guard(device);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free);
#else
  (void)device;
  return 0;
#endif
}

int64_t kv_pool_blocks(const model::ModelConfig& config, at::ScalarType dtype, c10::Device device,
                       const KVBudget& budget, int64_t wanted_blocks) {
  const int64_t block_bytes = model::PagedKVCache::block_bytes(config, budget.block_size, dtype);
  if (budget.gb < 0 || std::isnan(budget.gb))
    fail("--kv-cache-gb must be >= 0 (0 = default), got {}", budget.gb);
  if (budget.gb > 0) {
    const auto blocks = static_cast<int64_t>(budget.gb * 1073741824.0 / block_bytes) - 1;
    if (blocks < 1)
      fail("--kv-cache-gb {} holds no KV block ({} bytes for {} positions of this model)",
           budget.gb, block_bytes, budget.block_size);
    return blocks;
  }
  if (device.is_cuda()) {
    if (!(budget.gpu_memory_fraction > 0 && budget.gpu_memory_fraction <= 1))
      fail("--gpu-memory-fraction must be in (0, 1], got {}", budget.gpu_memory_fraction);
    const auto fits = static_cast<int64_t>(
        budget.gpu_memory_fraction * static_cast<double>(cuda_free_bytes(device)) / block_bytes);
    return std::max<int64_t>(1, std::min(wanted_blocks, fits - 1));
  }
  return std::max<int64_t>(1, wanted_blocks);
}

}  // namespace rqat::generation
