// Key/value cache for incremental decoding, organized in slots: each slot holds one sequence, and
// slots fill and empty independently, so the generation engine can retire finished sequences and
// prefill waiting prompts into their slots (continuous batching) while others keep decoding.
#pragma once

#include <ATen/Tensor.h>

#include <vector>

#include "model/model_config.h"

namespace rqat::model {

struct KVCache {
  KVCache(const ModelConfig& config, int64_t slots, int64_t capacity,
          const at::TensorOptions& options);

  std::vector<at::Tensor> keys;        // per layer: (slots, kv_heads, capacity, head_dim)
  std::vector<at::Tensor> values;      // per layer: same shape as keys
  at::Tensor valid;                    // bool (slots, capacity): cached position holds a real token
  std::vector<int64_t> length;         // cached positions per slot, padding included
  std::vector<int64_t> next_position;  // rotary position of each slot's next real token

  int64_t slots() const { return static_cast<int64_t>(length.size()); }
  int64_t capacity() const { return valid.size(1); }
  void reset_slot(int64_t slot);  // empties a slot for a new sequence
};

}  // namespace rqat::model
