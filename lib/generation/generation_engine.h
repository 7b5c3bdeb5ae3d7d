// Batched generation on the KV-cache decoder with continuous batching: each sample occupies one
// cache slot; when it finishes (EOS, stop string, length) it leaves and a waiting prompt is
// prefilled into its slot, so long reasoning traces do not hold short ones hostage.
// Every sample draws from its own generator seeded from (request seed, sample index), so on the CPU
// results do not depend on batch size or on which other prompts share the batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generation/sampling.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace rqat::generation {

enum class FinishReason { kStopToken, kStopString, kLength };
const char* finish_reason_name(FinishReason reason);  // "stop", "stop_string", "length"

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  int num_samples = 1;  // n samples of this prompt
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
  double seconds = 0;  // wall time from the sample's prefill to its end
};

struct EngineOptions {
  int64_t max_batch = 16;      // cache slots decoded together
  int64_t max_seq_len = 0;     // cache capacity per slot (0: longest prompt + max_new_tokens)
  bool show_progress = false;  // progress line on stderr: prompts done, tokens/s, ETA
};

// What the last generate() call did (for tests and benchmarks).
struct EngineStats {
  int64_t prefill_calls = 0;   // forward_cached calls over prompts (chunks count separately)
  int64_t prefill_tokens = 0;  // real prompt tokens run through the model
  int64_t prefix_copies = 0;   // samples whose prompt KV was copied from another slot
  int64_t decode_steps = 0;    // batched T = 1 forward calls
  int64_t decode_rows = 0;     // rows over all decode steps
  int64_t generated_tokens = 0;
  double seconds = 0;
};

class GenerationEngine {
 public:
  // tokenizer may be null: then stop strings are rejected and `text` stays empty.
  GenerationEngine(model::CausalLM& model, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                   EngineOptions options = {});

  // Results are ordered by (request_index, sample_index).
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests);

  const EngineStats& stats() const { return stats_; }

 private:
  model::CausalLM& model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  EngineOptions options_;
  EngineStats stats_;
};

}  // namespace rqat::generation
