// See kv_cache.h.
#include "model/kv_cache.h"

#include <ATen/ATen.h>

#include "io/error.h"

namespace rqat::model {

KVCache::KVCache(const ModelConfig& config, int64_t slots, int64_t capacity,
                 const at::TensorOptions& options) {
  if (slots <= 0 || capacity <= 0) fail("KV cache needs at least one slot and one position");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    keys.push_back(
        at::zeros({slots, config.num_key_value_heads, capacity, config.head_dim}, options));
    values.push_back(at::zeros_like(keys.back()));
  }
  valid = at::zeros({slots, capacity}, options.dtype(at::kBool));
  length.assign(slots, 0);
  next_position.assign(slots, 0);
}

void KVCache::reset_slot(int64_t slot) {
  valid[slot].fill_(false);
  length[slot] = 0;
  next_position[slot] = 0;
}

}  // namespace rqat::model
