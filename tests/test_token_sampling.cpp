// Token sampling on the device (ops/token_sampling.h): the fused CPU kernel against the sort-based
// reference on fresh random rows (peaked and flat, Qwen2.5's 151,936-token vocabulary, ties,
// every filter alone and combined), and the draw rule against a hand computation.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "generation/sampler.h"
#include "ops/token_sampling.h"
#include "test_util.h"

using rqat::generation::SamplingParams;

namespace {

// Random settings per row: greedy, temperature, top-k, top-p, min-p alone and combined.
std::vector<SamplingParams> random_settings(int64_t rows, at::Generator& gen) {
  std::vector<SamplingParams> out(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    auto& p = out[static_cast<size_t>(b)];
    auto r = at::rand({6}, gen);
    p.temperature = r[0].item<double>() < 0.1 ? 0.0 : 0.3 + 1.4 * r[1].item<double>();
    if (r[2].item<double>() < 0.4) p.top_k = 1 + static_cast<int64_t>(60 * r[3].item<double>());
    if (r[3].item<double>() < 0.7) p.top_p = 0.05 + 0.94 * r[4].item<double>();
    if (r[5].item<double>() < 0.3) p.min_p = 0.3 * r[4].item<double>();
  }
  return out;
}

void check_kernel_equals_reference(const at::Tensor& logits, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t rows = logits.size(0);
  const auto settings = random_settings(rows, gen);
  std::vector<const SamplingParams*> params;
  std::vector<double> uniforms;
  for (int64_t b = 0; b < rows; ++b) {
    params.push_back(&settings[static_cast<size_t>(b)]);
    uniforms.push_back(rqat::generation::sample_uniform(seed, 0, static_cast<uint64_t>(b)));
  }
  const auto s = rqat::generation::sampling_tensors(params, uniforms, at::kCPU);
  const auto kernel = rqat::ops::sample_tokens_cpu_kernel(logits, s);
  const auto ref = rqat::ops::sample_tokens_ref(logits, s);
  const auto kept = rqat::ops::kept_tokens_ref(logits, s);
  for (int64_t b = 0; b < rows; ++b) {
    const auto& p = settings[static_cast<size_t>(b)];
    INFO("row " << b << " T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p
                << " min_p " << p.min_p);
    const int64_t token = kernel.token[b].item<int64_t>();
    CHECK(token == ref.token[b].item<int64_t>());
    CHECK(kept[b][token].item<bool>());
    CHECK(kernel.logprob[b].item<float>() == ref.logprob[b].item<float>());
    CHECK(std::abs(kernel.tempered_logprob[b].item<float>() -
                   ref.tempered_logprob[b].item<float>()) < 1e-5);
  }
}

}  // namespace

TEST_CASE("CPU sampling kernel equals the sort-based reference on random rows") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  SECTION("peaked rows, small vocabulary") {
    check_kernel_equals_reference(at::randn({300, 50}, gen) * 4, 1);
  }
  SECTION("flat rows over Qwen2.5's vocabulary (top-p keeps tens of thousands of tokens)") {
    check_kernel_equals_reference(at::randn({24, 151936}, gen) * 1.6, 2);
  }
  SECTION("peaked rows over Qwen2.5's vocabulary") {
    check_kernel_equals_reference(at::randn({24, 151936}, gen) * 6, 3);
  }
  SECTION("many ties (integer logits) and masked tokens") {
    auto logits = at::randint(-3, 4, {300, 40}, gen).to(at::kFloat);
    logits.narrow(1, 0, 5).fill_(-std::numeric_limits<float>::infinity());
    check_kernel_equals_reference(logits, 4);
  }
}

TEST_CASE("an all-greedy batch takes the short path to the same tokens") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  auto logits = at::randn({16, 3001}, gen) * 3;
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<const SamplingParams*> params(16, &greedy);
  auto s = rqat::generation::sampling_tensors(params, std::vector<double>(16, 0.5), at::kCPU);
  REQUIRE(s.all_greedy);
  const auto fast = rqat::ops::sample_tokens(logits, s);
  s.all_greedy = false;  // the general paths, row by row
  for (const auto& full :
       {rqat::ops::sample_tokens_cpu_kernel(logits, s), rqat::ops::sample_tokens_ref(logits, s)}) {
    CHECK(at::equal(fast.token, full.token));
    CHECK(at::allclose(fast.logprob, full.logprob, 0, 1e-5));
    CHECK(at::allclose(fast.tempered_logprob, full.tempered_logprob, 0, 1e-5));
  }
  CHECK(at::equal(fast.token, logits.argmax(1)));
}

TEST_CASE("the draw is the inverse CDF over kept ids in id order") {
  // ids 0..4 hold probabilities 0.15, 0.5, 0.05, 0.2, 0.1; top-p 0.75 keeps {1, 3, 0} (mass 0.85).
  std::vector<float> logits;
  for (double p : {0.15, 0.5, 0.05, 0.2, 0.1}) logits.push_back(static_cast<float>(std::log(p)));
  auto row = at::tensor(logits, at::kFloat);
  SamplingParams p;
  p.top_p = 0.75;
  // In id order the kept cumulative masses are 0.15 (id 0), 0.65 (id 1), 0.85 (id 3).
  const std::pair<double, int32_t> draws[] = {{0.0, 0},  {0.17, 0}, {0.18, 1},
                                              {0.76, 1}, {0.77, 3}, {0.999999, 3}};
  for (const auto& [u, token] : draws) {
    INFO("u = " << u);
    CHECK(rqat::generation::sample_token(row, p, u).token == token);
  }
  // Greedy ignores u; temperature changes only the tempered log-probability.
  SamplingParams hot;
  hot.temperature = 2.0;
  hot.top_k = 1;
  const auto choice = rqat::generation::sample_token(row, hot, 0.3);
  CHECK(choice.token == 1);
  CHECK(std::abs(choice.logprob - std::log(0.5f)) < 1e-6);
  const double tempered =
      0.5 * std::log(0.5) - std::log(std::sqrt(0.15) + std::sqrt(0.5) + std::sqrt(0.05) +
                                     std::sqrt(0.2) + std::sqrt(0.1));
  CHECK(std::abs(choice.tempered_logprob - tempered) < 1e-5);
}
