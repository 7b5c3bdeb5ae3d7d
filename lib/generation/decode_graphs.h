// CUDA graphs for the decode step (forward + token choice), so that a step is one graph launch
// instead of hundreds of kernel launches from the host. One graph per batch-size bucket (1, 2, 4,
// ..., max_batch), captured the first time a bucket is used, over static input and output buffers
// of fixed shape: a step's rows are copied in, padding rows are made harmless (they write to the
// reserved block 0 and attend to one position), the graph is replayed.
//
// Safety: graphs are one of the kernels of ops/kernel_choice.h (cuda_graphs; the eager step is
// their twin): off with --kernels reference; in auto the first step of each bucket runs eagerly,
// is then captured with the same inputs and replayed, and the two results must agree (same
// tokens), else graphs are switched off for the process with one warning line; and when capture
// throws (a layer that syncs with the host, an old driver) they are switched off with one line on
// stderr and the engine runs eagerly. Nothing of this exists on the CPU or in a build without
// CUDA.
#pragma once

#include <memory>
#include <optional>

#include "model/decoder.h"
#include "ops/kernel_choice.h"
#include "ops/token_sampling.h"

namespace rqat::generation {

// The decode step both paths run: the paged forward, then the token choice on the device.
ops::SampledTokens decode_and_sample(model::CausalLM& model, model::PagedKVCache& cache,
                                     const model::PagedStep& step,
                                     const ops::SamplingTensors& sampling);

class DecodeGraphs {
 public:
  // max_blocks: the block-table width every step is built with (the longest request's blocks).
  DecodeGraphs(model::CausalLM& model, model::PagedKVCache& cache, int64_t max_batch,
               int64_t max_blocks, bool enabled);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  bool enabled() const { return enabled_; }
  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }

  // The step through a graph (step.block_tables must be max_blocks wide); nullopt when graphs are
  // off, and the caller runs decode_and_sample itself.
  std::optional<ops::SampledTokens> run(const model::PagedStep& step,
                                        const ops::SamplingTensors& sampling);

 private:
  struct Bucket;
  void disable(const std::string& why);  // why: the line to print ("" for none)
  void give_up(const ops::KernelCheck& check);
  void perturb_if_faulty(ops::SampledTokens& out) const;

  model::CausalLM& model_;
  model::PagedKVCache& cache_;
  int64_t max_batch_, max_blocks_;
  bool enabled_;
  int64_t replays_ = 0, captures_ = 0;
  std::vector<std::unique_ptr<Bucket>> buckets_;  // index: 2 log2(size) + all rows greedy
};

}  // namespace rqat::generation
