// The engine on its paged KV cache: a pool too small for every sequence at once (preemption and
// recomputation, same tokens as an ample pool, greedy and sampled), samples of a long prompt
// holding its blocks once, KV memory against contiguous slots, what crosses to the host per
// step, budget errors, a subset of samples, results streamed as they end, and a stop request.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <utility>

#include "generation/generation_engine.h"
#include "model/decoder.h"
#include "model/paged_kv_cache.h"
#include "test_util.h"

using rqat::generation::EngineOptions;
using rqat::generation::GenerationEngine;
using rqat::generation::GenerationRequest;
using rqat::generation::GenerationResult;
using rqat::model::Family;

namespace {

GenerationRequest request(std::vector<int32_t> prompt, int64_t max_new, double temperature,
                          int n = 1, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = temperature;
  r.params.top_p = temperature > 0 ? 0.9 : 1.0;
  r.params.max_new_tokens = max_new;
  r.num_samples = n;
  r.seed = seed;
  return r;
}

// A budget of `blocks` usable blocks of `block_size` positions for this model (f32).
double budget_gb(const rqat::model::CausalLM& model, int64_t blocks, int64_t block_size) {
  const auto bytes = rqat::model::PagedKVCache::block_bytes(model.config(), block_size, at::kFloat);
  // Half a block over, so that rounding cannot take one away.
  return (static_cast<double>(blocks) + 1.5) * static_cast<double>(bytes) / 1073741824.0;
}

void require_same(const std::vector<GenerationResult>& a, const std::vector<GenerationResult>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i);
    CHECK(a[i].token_ids == b[i].token_ids);
    CHECK(a[i].finish_reason == b[i].finish_reason);
    REQUIRE(a[i].logprobs.size() == b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t)
      CHECK(std::abs(a[i].logprobs[t] - b[i].logprobs[t]) < 1e-4);
  }
}

}  // namespace

TEST_CASE("a pool too small for every sequence preempts, recomputes and gives the same tokens") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true, 21);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back(request(rqat::test::random_tokens(3 + 5 * i, 100 + i), 40, 0.0));
  requests.push_back(request(rqat::test::random_tokens(9, 200), 40, 0.8, /*n=*/3, /*seed=*/77));
  requests.push_back(request(rqat::test::random_tokens(20, 201), 33, 1.1, /*n=*/2, /*seed=*/78));

  EngineOptions ample{16};
  ample.block_size = 4;
  GenerationEngine roomy(*model, nullptr, ample);
  const auto expected = roomy.generate(requests);
  CHECK(roomy.stats().preemptions == 0);

  // 20 blocks of 4 positions hold the longest sequence (28 + 40 = 68 positions, 17 blocks) but
  // nowhere near 11 sequences of up to 68 positions at once.
  EngineOptions tight = ample;
  tight.kv_cache_gb = budget_gb(*model, 20, 4);
  GenerationEngine cramped(*model, nullptr, tight);
  const auto results = cramped.generate(requests);
  const auto& stats = cramped.stats();
  CHECK(stats.kv_pool_blocks == 20);
  CHECK(stats.preemptions > 0);
  CHECK(stats.recomputed_tokens > 0);
  CHECK(stats.peak_blocks_in_use <= 20);
  CHECK(stats.generated_tokens == roomy.stats().generated_tokens);
  require_same(results, expected);

  // A pool that cannot hold the longest sequence at all is refused up front, naming the flag.
  EngineOptions tiny = ample;
  tiny.kv_cache_gb = budget_gb(*model, 10, 4);
  GenerationEngine too_small(*model, nullptr, tiny);
  rqat::test::require_error([&] { too_small.generate(requests); }, {"--kv-cache-gb"});
}

TEST_CASE("8 samples of a 1,000-token prompt hold the prompt's blocks once") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, false, 22);
  const auto prompt = rqat::test::random_tokens(1000, 300);
  const int64_t max_new = 20;
  EngineOptions options{8};
  options.block_size = 16;
  GenerationEngine engine(*model, nullptr, options);
  const auto results = engine.generate({request(prompt, max_new, 1.0, /*n=*/8, /*seed=*/5)});
  REQUIRE(results.size() == 8);
  const auto& stats = engine.stats();
  CHECK(stats.prefill_tokens == 1000);
  CHECK(stats.shared_prompts == 7);
  // 1,000 positions = 62 full blocks, shared, plus 8 positions in a partly filled block that each
  // sample copies on its first write; each sample then grows to 8 + 20 = 28 positions of its
  // own: 2 blocks. Held at the peak: the 62 shared, the prompt's own last block (kept by the first
  // sample's table until it ends), and 2 per sample.
  CHECK(stats.peak_blocks_in_use <= 62 + 1 + 8 * 2);
  CHECK(stats.peak_blocks_in_use >= 62 + 8);
  const int64_t unshared_blocks = 8 * ((1000 + max_new + 15) / 16);
  CHECK(stats.peak_blocks_in_use * 6 < unshared_blocks);  // 504 blocks without sharing
  // The samples are all different continuations of one prompt.
  CHECK(results[0].token_ids != results[1].token_ids);
}

TEST_CASE("KV memory in use follows the tokens, not the longest request") {
  auto model = rqat::test::random_tiny_model(Family::kQwen2, false, 23);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i)
    requests.push_back(
        request(rqat::test::random_tokens(i == 0 ? 200 : 4 + i, 400 + i), 8 + 30 * (i == 0), 0));
  EngineOptions options{8};
  GenerationEngine engine(*model, nullptr, options);
  engine.generate(requests);
  const auto& stats = engine.stats();
  // Contiguous slots: 8 x 238 positions; paged: about 238 + 7 x 20.
  CHECK(stats.contiguous_kv_bytes == 8 * 238 * stats.kv_block_bytes / 16);
  CHECK(stats.peak_kv_bytes() * 3 < stats.contiguous_kv_bytes);
}

TEST_CASE("a decode step copies only ids and log-probabilities to the host") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true, 24);
  EngineOptions options{4};
  GenerationEngine engine(*model, nullptr, options);
  const auto results = engine.generate({request(rqat::test::random_tokens(7, 500), 12, 0.7, 3, 9),
                                        request(rqat::test::random_tokens(3, 501), 9, 0.0)});
  const auto& stats = engine.stats();
  // Every drawn token costs 12 bytes (int32 id, two float32 log-probabilities): nothing of the
  // (rows x vocab) logits crosses.
  CHECK(stats.host_bytes == 12 * stats.generated_tokens);
  CHECK(stats.generated_tokens == 3 * 12 + 9);
}

TEST_CASE("engine options out of range are one-line errors") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, true, 25);
  EngineOptions odd{4};
  odd.block_size = 12;
  rqat::test::require_error([&] { GenerationEngine(*model, nullptr, odd); },
                            {"--kv-block-size", "power of two"});
  EngineOptions negative{4};
  negative.kv_cache_gb = -1;
  GenerationEngine engine(*model, nullptr, negative);
  rqat::test::require_error([&] { engine.generate({request({1, 2}, 3, 0)}); }, {"--kv-cache-gb"});
}

TEST_CASE("a subset of a request's samples is those samples of the whole request") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true, 23);
  std::vector<GenerationRequest> whole = {
      request(rqat::test::random_tokens(7, 300), 24, 0.9, /*n=*/6, /*seed=*/5),
      request(rqat::test::random_tokens(12, 301), 24, 0.7, /*n=*/3, /*seed=*/6)};
  GenerationEngine engine(*model, nullptr, EngineOptions{4});
  std::vector<GenerationResult> streamed;
  const auto all = engine.generate(whole, [&](const GenerationResult& r) { streamed.push_back(r); });
  REQUIRE(all.size() == 9);
  // Every sample was handed to the callback once, complete, as it ended.
  REQUIRE(streamed.size() == 9);
  std::sort(streamed.begin(), streamed.end(), [](const auto& a, const auto& b) {
    return std::pair(a.request_index, a.sample_index) < std::pair(b.request_index, b.sample_index);
  });
  require_same(streamed, all);

  // Samples 1, 4 and 5 of the first request and sample 2 of the second, as a resumed evaluation
  // asks for them: the same tokens as in the whole run, under their own indices.
  auto part = whole;
  part[0].sample_indices = {1, 4, 5};
  part[1].sample_indices = {2};
  const auto some = engine.generate(part);
  REQUIRE(some.size() == 4);
  const std::vector<std::pair<size_t, int>> want = {{0, 1}, {0, 4}, {0, 5}, {1, 2}};
  for (size_t i = 0; i < some.size(); ++i) {
    INFO("subset result " << i);
    CHECK(std::pair(some[i].request_index, some[i].sample_index) == want[i]);
    const auto& full = all[want[i].first == 0 ? want[i].second : 6 + want[i].second];
    CHECK(some[i].token_ids == full.token_ids);
    REQUIRE(some[i].logprobs.size() == full.logprobs.size());
    for (size_t t = 0; t < full.logprobs.size(); ++t)  // other batch rows: float rounding only
      CHECK(std::abs(some[i].logprobs[t] - full.logprobs[t]) < 1e-4);
  }

  for (const std::vector<int>& bad : {std::vector<int>{6}, {-1}, {2, 2}, {3, 1}}) {
    auto wrong = whole;
    wrong[0].sample_indices = bad;
    rqat::test::require_error([&] { engine.generate(wrong); },
                              {"generation request 0", "sample_indices must increase within [0, 6)"});
  }
}

TEST_CASE("a stop request returns the finished samples only") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, false, 24);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i)
    requests.push_back(request(rqat::test::random_tokens(5 + i, 400 + i), 16, 0.0));
  EngineOptions options{1};  // one sequence at a time: samples end one after another
  int finished = 0;
  options.stop_requested = [&] { return finished >= 3; };
  GenerationEngine engine(*model, nullptr, options);
  const auto results = engine.generate(requests, [&](const GenerationResult&) { ++finished; });
  CHECK(engine.stats().stopped);
  REQUIRE(results.size() == 3);
  GenerationEngine unstopped(*model, nullptr, EngineOptions{1});
  const auto all = unstopped.generate(requests);
  CHECK_FALSE(unstopped.stats().stopped);
  for (size_t i = 0; i < results.size(); ++i) {
    CHECK(results[i].request_index == i);
    CHECK(results[i].token_ids == all[i].token_ids);
    CHECK(results[i].token_ids.size() == 16);
  }
}
