// The sampling protocols of math-reasoning evaluation, one flag apart: greedy decoding, and the
// published reasoning protocol (DeepSeek-R1, Qwen3: temperature 0.6, top-p 0.95, several samples,
// long outputs). Explicit flags override the protocol's values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/options.h"

namespace rqat::eval {

struct SamplingSettings {
  int n = 1;               // samples per problem
  double temperature = 0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;
  double min_p = 0;
  int64_t max_new_tokens = 4096;
  uint64_t seed = 0;

  // Declared once (io/options.h): the run's config.json records io::options_json of this.
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.n, "n", "Samples per problem");
    v.value(self.temperature, "temperature", "Sampling temperature (0: greedy)");
    v.value(self.top_p, "top-p", "Nucleus sampling mass");
    v.value(self.top_k, "top-k", "Top-k sampling (0: off)");
    v.value(self.min_p, "min-p", "Min-p sampling (0: off)");
    v.value(self.max_new_tokens, "max-new-tokens", "Generation limit");
    v.value(self.seed, "seed", "Sampling seed");
  }
};

struct SamplingOverrides {
  std::optional<int> n;
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k, max_new_tokens;
  std::optional<uint64_t> seed;
};

// "greedy": n 1, temperature 0, 4,096 new tokens. "reasoning": n 8, temperature 0.6, top-p 0.95,
// 32,768 new tokens. Then each set override replaces its value; the result is validated (n >= 1,
// temperature >= 0, 0 < top_p <= 1, ...) with errors naming the flag.
SamplingSettings resolve_sampling(const std::string& protocol, const SamplingOverrides& overrides);

}  // namespace rqat::eval
