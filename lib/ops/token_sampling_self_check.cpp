// The first-use self-check of the fused CPU sampling kernel (ops/kernel_self_checks.h): for a
// seed's uniforms it must draw the same tokens (the error: how many differ) as the sort-based
// reference sample_tokens_ref, with
// the same log-probabilities (bit for bit, as its test states) and tempered log-probabilities
// within 1e-5. Rows mix greedy, temperature, top-k, top-p and min-p, alone and combined; cases:
// peaked rows over a small vocabulary, integer logits (ties at every filter's boundary) with
// masked tokens, and flat rows over Qwen2.5's 151,936 ids.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>

#include "ops/kernel_self_checks.h"
#include "ops/token_sampling.h"

namespace rqat::ops {

namespace {

// Per row: greedy one row in eight, else a temperature in [0.3, 1.7], top-k on two rows in five,
// top-p on seven in ten, min-p on three in ten (the settings' tensors as generation builds them).
SamplingTensors random_settings(int64_t rows, at::Generator& gen) {
  auto r = at::rand({rows, 6}, gen, at::kDouble);
  SamplingTensors s;
  s.greedy = r.select(1, 0) < 0.125;
  const auto temperature = 0.3 + 1.4 * r.select(1, 1);
  s.inv_temperature =
      at::where(s.greedy, at::ones_like(temperature), 1.0 / temperature).to(at::kFloat);
  s.top_k = at::where(r.select(1, 2) < 0.4, 1 + (60 * r.select(1, 3)).floor(),
                      at::zeros_like(temperature))
                .to(at::kLong);
  s.top_p =
      at::where(r.select(1, 3) < 0.7, 0.05 + 0.94 * r.select(1, 4), at::ones_like(temperature));
  s.min_p = at::where(r.select(1, 5) < 0.3, 0.3 * r.select(1, 4), at::zeros_like(temperature));
  s.uniform = at::rand({rows}, gen, at::kDouble);
  return s;
}

}  // namespace

KernelCheck check_token_sampling(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  struct SamplingCase {
    const char* name;
    int64_t rows, vocab;
    double spread;
    bool integer_logits;
  };
  const SamplingCase sampling_cases[] = {
      {"peaked rows, 50 ids", 64, 50, 4.0, false},
      {"ties and masked ids, 40 ids", 64, 40, 0.0, true},
      {"flat rows, 151936 ids", 3, 151936, 1.6, false},
  };
  uint64_t seed = 0x5eed0005;
  for (const auto& c : sampling_cases) {
    cases.run(c.name, [&] {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
      at::Tensor logits;
      if (c.integer_logits) {
        logits = at::randint(-3, 4, {c.rows, c.vocab}, gen).to(at::kFloat);
        logits.narrow(1, 0, 5).fill_(-std::numeric_limits<float>::infinity());
      } else {
        logits = at::randn({c.rows, c.vocab}, gen) * c.spread;
      }
      SamplingTensors s = random_settings(c.rows, gen);
      logits = logits.to(device);
      for (at::Tensor* t :
           {&s.inv_temperature, &s.greedy, &s.top_k, &s.top_p, &s.min_p, &s.uniform})
        *t = t->to(device);
      const auto got = sample_tokens_cpu_kernel(logits, s);
      const auto want = sample_tokens_ref(logits, s);
      cases.compare_ids(got.token, want.token);
      cases.compare_exact(got.logprob, want.logprob);
      cases.compare(got.tempered_logprob, want.tempered_logprob, at::Tensor(), 1e-5);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
