// Paged key/value cache (vLLM's PagedAttention layout): one pool of fixed-size blocks per layer,
// shared by all sequences. A sequence owns a block table, the ordered list of blocks that hold its
// positions; blocks are taken as it grows and given back when it ends, so memory follows the
// tokens actually generated instead of the longest length any request may reach.
//
// Blocks carry reference counts: the n samples of one prompt fork the prompt's sequence and share
// its blocks. Before a sequence writes into a shared block (the partly filled last block of a
// fork) it gets its own copy (copy on write). Block 0 is never handed out: padding positions of a
// batched forward write there, so every write has a valid address and no branch.
//
// This header is the bookkeeping (host side) and the pools; CausalLM::forward_paged reads and
// writes them, ops/paged_attention.h attends over them.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace rqat::model {

// The positions a sequence has in the cache and the blocks that hold them.
struct PagedSequence {
  std::vector<int32_t> blocks;
  int64_t length = 0;  // positions written (prompt and generated tokens)
};

class PagedKVCache {
 public:
  // num_blocks counts the reserved block 0; block_size: positions per block, a power of two.
  PagedKVCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
               const at::TensorOptions& options);

  // Bytes of one block over all layers, keys and values: the unit of the memory budget.
  static int64_t block_bytes(const ModelConfig& config, int64_t block_size, at::ScalarType dtype);

  std::vector<at::Tensor> keys;    // per layer: (num_blocks, block_size, kv_heads, head_dim)
  std::vector<at::Tensor> values;  // per layer: same shape as keys

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(refcount_.size()); }
  int64_t usable_blocks() const { return num_blocks() - 1; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_in_use() const { return usable_blocks() - free_blocks(); }
  int32_t refcount(int32_t block) const { return refcount_[static_cast<size_t>(block)]; }
  int64_t blocks_for(int64_t positions) const {
    return (positions + block_size_ - 1) / block_size_;
  }

  // Free blocks that seq must take before it can hold `length` positions: new blocks past its
  // table, plus a private copy of a shared block that the new positions would write into.
  int64_t blocks_needed(const PagedSequence& seq, int64_t length) const;
  // Makes seq able to hold `length` positions (allocating, and copying a shared partly filled last
  // block); returns false, changing nothing, when the pool has too few free blocks.
  bool reserve(PagedSequence& seq, int64_t length);
  // A sequence that shares every block of `parent` (the samples of one prompt).
  PagedSequence fork(const PagedSequence& parent);
  // Gives seq's blocks back (shared ones once their last holder lets go) and empties it.
  void release(PagedSequence& seq);

 private:
  int32_t take_block();
  void copy_block(int32_t from, int32_t to);

  int64_t block_size_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // kept so that back() is the lowest free block
};

}  // namespace rqat::model
