// The device-side description of one batched forward over the paged KV cache: which tokens each
// row appends to its sequence, where their keys and values go, and what each row attends to. Built
// on the host from the sequences' block tables, then moved to the model's device in one copy.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/paged_kv_cache.h"

namespace rqat::model {

struct PagedStep {
  at::Tensor input_ids;      // int64 (B, T): row b's new tokens, right padded with 0
  at::Tensor positions;      // int64 (B, T): sequence position of each token (cached length + t)
  at::Tensor slot_mapping;   // int64 (B * T): pool row of each token; padding goes to block 0
  at::Tensor block_tables;   // int32 (B, max_blocks): unused entries are 0
  at::Tensor context_lens;   // int32 (B): positions after the step (cached + new)
  at::Tensor last_index;     // int64 (B): t of each row's last new token
  int64_t max_position = 0;  // largest position (host copy: no device sync for the rotary)
  int64_t max_context = 0;   // largest context length (host copy)
  bool fresh_sequences = false;  // every row starts at position 0
};

// Row b appends new_tokens[b] (at least one) to seqs[b], whose blocks must already hold
// seqs[b]->length + new_tokens[b].size() positions (PagedKVCache::reserve). max_blocks_hint widens
// the block tables to at least that many columns (CUDA graphs keep one width per capture).
PagedStep make_paged_step(const std::vector<const PagedSequence*>& seqs,
                          const std::vector<std::span<const int32_t>>& new_tokens,
                          int64_t block_size, c10::Device device, int64_t max_blocks_hint = 0);

}  // namespace rqat::model
