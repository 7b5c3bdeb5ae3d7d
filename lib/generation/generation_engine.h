// Batched generation on a paged KV cache with continuous batching (vLLM's scheduling, simplified):
// - every sample is a sequence with a block table; blocks come from one pool sized by a memory
//   budget and are taken as the sequence grows, returned when it ends;
// - waiting samples are admitted while there are free blocks (and fewer than max_batch run);
//   the n samples of one prompt share its prefill and its blocks (the partly filled last block is
//   copied on first write);
// - when a decode step finds the pool empty, the most recently admitted sequence is preempted: its
//   blocks go back and it waits again, to be recomputed from its prompt and generated tokens;
//   a small pool makes generation slower, never different;
// - each step's tokens are chosen on the model's device; only ids and log-probabilities come back.
// Draws are keyed by (request seed, sample index, token position) (generation/sampler.h), so a
// sample's tokens do not depend on batch size, batch composition or preemption.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generation/sampling.h"
#include "io/enum_names.h"
#include "io/options.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace rqat::generation {

enum class FinishReason { kStopToken, kStopString, kLength, kCount };
constexpr EnumNames<FinishReason> enum_names(FinishReason) {
  return {"stop", "stop_string", "length"};
}

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  int num_samples = 1;  // n samples of this prompt
  // When not empty: only these samples of the n, in increasing order (a resumed evaluation
  // generates the samples it lacks). A sample's tokens depend on its index, not on which others
  // run, so sample 5 alone is sample 5 of a full run.
  std::vector<int> sample_indices;
  uint64_t seed = 0;
  SamplingParams params;
};

struct GenerationResult {
  size_t request_index = 0;
  int sample_index = 0;
  std::vector<int32_t>
      token_ids;  // generated tokens only (the stop token included when one ended it)
  std::vector<float>
      logprobs;  // log p(token) under the unmodified model distribution (temperature 1)
  std::vector<float> tempered_logprobs;  // log p(token) at the sampling temperature (see
                                         // TokenChoice::tempered_logprob)
  std::string text;  // decoded generated tokens (special tokens skipped), cut at a stop string
  FinishReason finish_reason = FinishReason::kLength;
  double seconds = 0;  // wall time from the sample's admission to its end
};

struct EngineOptions {
  int64_t max_batch = 16;      // sequences decoded together at most
  int64_t max_seq_len = 0;     // longest prompt + max_new_tokens accepted (0: no limit)
  bool show_progress = false;  // progress line on stderr: prompts done, tokens/s, ETA
  // KV pool budget in GiB. 0: on the CPU, enough for max_batch sequences of the longest request;
  // on CUDA, that much capped by gpu_memory_fraction of the memory free after loading.
  double kv_cache_gb = 0;
  int64_t block_size = 16;           // positions per KV block (a power of two)
  double gpu_memory_fraction = 0.9;  // CUDA default budget (vLLM's gpu_memory_utilization)
  bool share_prompts = true;         // samples of one prompt share its prefill and blocks
  bool cuda_graphs = true;  // CUDA: replay a captured graph per batch-size bucket for decode steps
  // Polled between steps; when it says true, generate() returns the samples finished so far
  // (stats().stopped is set): a signal's stop of a long evaluation (io/stop_request.h).
  std::function<bool()> stop_requested = {};

  // The flags every generating tool offers (eval-math, grpo's rollouts as --rollout-batch, rqat
  // generate and traces), declared once (io/options.h). They change memory and speed, not the
  // samples: run control.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.max_batch, "max-batch", "Sequences decoded together at most", Role::kRunControl);
    v.value(self.kv_cache_gb, "kv-cache-gb",
            "KV cache budget in GiB (0: what the run can use; on CUDA at most "
            "--gpu-memory-fraction of the free memory)",
            Role::kRunControl);
    v.value(self.block_size, "kv-block-size", "Positions per KV cache block (a power of two)",
            Role::kRunControl);
    v.value(self.gpu_memory_fraction, "gpu-memory-fraction",
            "CUDA: fraction of the free memory the default KV budget may take", Role::kRunControl);
    v.value(self.cuda_graphs, "cuda-graphs",
            "CUDA: replay captured graphs for decode steps (default on)", Role::kRunControl,
            {.negation = "no-cuda-graphs"});
  }
};

// What the last generate() call did (for tests and benchmarks).
struct EngineStats {
  int64_t prefill_calls = 0;   // forward calls over prompts (chunks count separately)
  int64_t prefill_tokens = 0;  // prompt (and recomputed) tokens run through the model
  int64_t shared_prompts = 0;  // samples that reused another sample's prompt blocks
  int64_t decode_steps = 0;    // batched one-token forward calls
  int64_t decode_rows = 0;     // rows over all decode steps
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;          // sequences evicted from the pool to be recomputed later
  int64_t recomputed_tokens = 0;    // tokens prefilled again after preemption
  int64_t kv_pool_blocks = 0;       // usable blocks of the pool
  int64_t kv_block_bytes = 0;       // bytes of one block (all layers, keys and values)
  int64_t peak_blocks_in_use = 0;   // most blocks held at once
  int64_t contiguous_kv_bytes = 0;  // one slot of the longest request per concurrent sequence
  int64_t host_bytes = 0;           // bytes copied from the device to the host by sampling
  int64_t graph_captures = 0;       // CUDA graphs captured (one per batch-size bucket used)
  int64_t graph_replays = 0;        // decode steps run by replaying a graph
  bool stopped = false;             // stop_requested ended the call before every sample finished
  double seconds = 0;
  int64_t peak_kv_bytes() const { return peak_blocks_in_use * kv_block_bytes; }
};

// Called on the generating thread as each sample ends (text decoded), in the order samples end:
// for streaming results to disk while a long generation goes.
using ResultCallback = std::function<void(const GenerationResult&)>;

// The samples a request asks for: its sample_indices, or 0..num_samples-1.
std::vector<int> requested_samples(const GenerationRequest& request);

// GenerationResult::text of a finished sample: its tokens decoded with special tokens skipped (the
// stop token left out when one ended it), cut at the first of `stop_strings`. Also what a resumed
// evaluation checks a kept sample against (tools/eval_run/partial_samples.h).
std::string completion_text(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<int32_t>& token_ids, FinishReason reason,
                            const std::vector<std::string>& stop_strings);

class GenerationEngine {
 public:
  // tokenizer may be null: then stop strings are rejected and `text` stays empty.
  GenerationEngine(model::CausalLM& model, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                   EngineOptions options = {});

  // Results are ordered by (request_index, sample_index); on_result, when set, sees each as it
  // ends. When stopped (EngineOptions::stop_requested), only the finished samples are returned.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const ResultCallback& on_result = {});

  const EngineStats& stats() const { return stats_; }

 private:
  model::CausalLM& model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  EngineOptions options_;
  EngineStats stats_;
};

}  // namespace rqat::generation
