// Sampling settings of one generation request, and the per-row token choice from logits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rqat::generation {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy (argmax)
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // 0 = off; keep tokens with p >= min_p * p_max
  int64_t max_new_tokens = 256;
  std::vector<int32_t> stop_token_ids;  // e.g. the model's EOS ids
  std::vector<std::string> stop_strings;
  bool greedy() const { return temperature <= 0; }
};

}  // namespace rqat::generation
