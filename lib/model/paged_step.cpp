// See paged_step.h.
#include "model/paged_step.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "io/error.h"
#include "ops/host_copy.h"

namespace rqat::model {

PagedStep make_paged_step(const std::vector<const PagedSequence*>& seqs,
                          const std::vector<std::span<const int32_t>>& new_tokens,
                          int64_t block_size, c10::Device device, int64_t max_blocks_hint) {
  const int64_t batch = static_cast<int64_t>(seqs.size());
  if (batch == 0 || new_tokens.size() != seqs.size())
    fail("paged step: {} sequences and {} token lists", seqs.size(), new_tokens.size());
  int64_t steps = 0, max_blocks = std::max<int64_t>(1, max_blocks_hint);
  PagedStep out;
  out.fresh_sequences = true;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& seq = *seqs[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(new_tokens[static_cast<size_t>(b)].size());
    if (n < 1) fail("paged step: row {} has no new token", b);
    if (seq.length + n > static_cast<int64_t>(seq.blocks.size()) * block_size)
      fail("paged step: row {} needs {} positions but holds blocks for {}", b, seq.length + n,
           static_cast<int64_t>(seq.blocks.size()) * block_size);
    steps = std::max(steps, n);
    max_blocks = std::max(max_blocks, static_cast<int64_t>(seq.blocks.size()));
    out.max_context = std::max(out.max_context, seq.length + n);
    out.fresh_sequences = out.fresh_sequences && seq.length == 0;
  }
  out.max_position = out.max_context - 1;

  // Everything in one int64 host buffer, one copy to the device, then views into it.
  const int64_t n_ids = batch * steps, n_tables = batch * max_blocks;
  auto host = at::zeros({3 * n_ids + n_tables + 2 * batch}, at::kLong);
  int64_t* ids = host.data_ptr<int64_t>();
  int64_t* positions = ids + n_ids;
  int64_t* slots = positions + n_ids;
  int64_t* tables = slots + n_ids;
  int64_t* context = tables + n_tables;
  int64_t* last = context + batch;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& seq = *seqs[static_cast<size_t>(b)];
    const auto tokens = new_tokens[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t i = b * steps + t;
      const int64_t pos = seq.length + std::min(t, n - 1);  // padding repeats the last position
      positions[i] = pos;
      if (t < n) {
        ids[i] = tokens[static_cast<size_t>(t)];
        slots[i] =
            seq.blocks[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size;
      }  // else: id 0 written to block 0 (slot 0)
    }
    for (size_t j = 0; j < seq.blocks.size(); ++j)
      tables[b * max_blocks + static_cast<int64_t>(j)] = seq.blocks[j];
    context[b] = seq.length + n;
    last[b] = n - 1;
  }
  auto dev = ops::copy_to_device(host, device);
  out.input_ids = dev.narrow(0, 0, n_ids).view({batch, steps});
  out.positions = dev.narrow(0, n_ids, n_ids).view({batch, steps});
  out.slot_mapping = dev.narrow(0, 2 * n_ids, n_ids);
  out.block_tables = dev.narrow(0, 3 * n_ids, n_tables).view({batch, max_blocks}).to(at::kInt);
  out.context_lens = dev.narrow(0, 3 * n_ids + n_tables, batch).to(at::kInt);
  out.last_index = dev.narrow(0, 3 * n_ids + n_tables + batch, batch);
  return out;
}

}  // namespace rqat::model
