// See paged_kv_cache.h.
#include "model/paged_kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "io/error.h"

namespace rqat::model {

PagedKVCache::PagedKVCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
                           const at::TensorOptions& options)
    : block_size_(block_size) {
  if (block_size < 1 || (block_size & (block_size - 1)) != 0)
    fail("KV cache: block size must be a power of two, got {}", block_size);
  if (num_blocks < 2)
    fail("KV cache: {} blocks leave none for sequences (block 0 is reserved)", num_blocks);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    keys.push_back(
        at::zeros({num_blocks, block_size, config.num_key_value_heads, config.head_dim}, options));
    values.push_back(at::zeros_like(keys.back()));
  }
  refcount_.assign(static_cast<size_t>(num_blocks), 0);
  refcount_[0] = 1;  // the padding block, never handed out
  for (int64_t b = num_blocks - 1; b >= 1; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t PagedKVCache::block_bytes(const ModelConfig& config, int64_t block_size,
                                  at::ScalarType dtype) {
  return 2 * config.num_hidden_layers * block_size * config.num_key_value_heads * config.head_dim *
         static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t PagedKVCache::blocks_needed(const PagedSequence& seq, int64_t length) const {
  const int64_t have = static_cast<int64_t>(seq.blocks.size());
  int64_t need = std::max<int64_t>(0, blocks_for(length) - have);
  // The next position lands in the last block when it is partly filled; shared, it is copied.
  if (length > seq.length && seq.length % block_size_ != 0 && refcount(seq.blocks.back()) > 1)
    ++need;
  return need;
}

bool PagedKVCache::reserve(PagedSequence& seq, int64_t length) {
  if (blocks_needed(seq, length) > free_blocks()) return false;
  if (length > seq.length && seq.length % block_size_ != 0 && refcount(seq.blocks.back()) > 1) {
    const int32_t shared = seq.blocks.back();
    const int32_t own = take_block();
    copy_block(shared, own);
    --refcount_[static_cast<size_t>(shared)];
    seq.blocks.back() = own;
  }
  while (static_cast<int64_t>(seq.blocks.size()) < blocks_for(length))
    seq.blocks.push_back(take_block());
  return true;
}

PagedSequence PagedKVCache::fork(const PagedSequence& parent) {
  for (const int32_t b : parent.blocks) ++refcount_[static_cast<size_t>(b)];
  return parent;
}

void PagedKVCache::release(PagedSequence& seq) {
  for (const int32_t b : seq.blocks) {
    if (--refcount_[static_cast<size_t>(b)] == 0)
      free_.insert(std::upper_bound(free_.begin(), free_.end(), b, std::greater<>()), b);
  }
  seq.blocks.clear();
  seq.length = 0;
}

int32_t PagedKVCache::take_block() {
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[static_cast<size_t>(b)] = 1;
  return b;
}

void PagedKVCache::copy_block(int32_t from, int32_t to) {
  for (size_t l = 0; l < keys.size(); ++l) {
    keys[l][to].copy_(keys[l][from]);
    values[l][to].copy_(values[l][from]);
  }
}

}  // namespace rqat::model
