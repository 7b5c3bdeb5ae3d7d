#include "eval/sampling_protocol.h"

#include "io/error.h"

namespace rqat::eval {

SamplingSettings resolve_sampling(const std::string& protocol, const SamplingOverrides& o) {
  SamplingSettings s;
  if (protocol == "greedy") {
    s.n = 1;
    s.temperature = 0;
    s.max_new_tokens = 4096;
  } else if (protocol == "reasoning") {
    // Several samples averaged into pass@1 and long outputs, as the R1 report evaluates; 8 rather
    // than R1's 64 keeps a default run affordable (--n raises it).
    s.n = 8;
    s.temperature = 0.6;
    s.top_p = 0.95;
    s.max_new_tokens = 32768;
  } else {
    fail("--protocol must be greedy or reasoning, got '{}'", protocol);
  }
  if (o.n) s.n = *o.n;
  if (o.temperature) s.temperature = *o.temperature;
  if (o.top_p) s.top_p = *o.top_p;
  if (o.top_k) s.top_k = *o.top_k;
  if (o.min_p) s.min_p = *o.min_p;
  if (o.max_new_tokens) s.max_new_tokens = *o.max_new_tokens;
  if (o.seed) s.seed = *o.seed;
  if (s.n < 1) fail("--n must be >= 1, got {}", s.n);
  if (s.temperature < 0) fail("--temperature must be >= 0, got {}", s.temperature);
  if (!(s.top_p > 0 && s.top_p <= 1)) fail("--top-p must be in (0, 1], got {}", s.top_p);
  if (s.top_k < 0) fail("--top-k must be >= 0, got {}", s.top_k);
  if (!(s.min_p >= 0 && s.min_p < 1)) fail("--min-p must be in [0, 1), got {}", s.min_p);
  if (s.max_new_tokens < 1) fail("--max-new-tokens must be >= 1, got {}", s.max_new_tokens);
  return s;
}

}  // namespace rqat::eval
