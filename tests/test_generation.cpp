// Generation without Python: the sampler against closed forms (greedy, top-k, top-p, min-p,
// temperature frequencies, log-probabilities), and the continuous-batching engine on random tiny
// models against an independent reference (the full forward on the growing sequence, argmax), plus
// reproducibility across batch sizes and batch composition, prefix sharing, stop tokens/strings,
// edge cases and errors.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>
#include <set>

#include "generation/generation_engine.h"
#include "generation/sampler.h"
#include "io/error.h"
#include "model/decoder.h"
#include "model/init.h"
#include "test_util.h"

using rqat::generation::EngineOptions;
using rqat::generation::FinishReason;
using rqat::generation::GenerationEngine;
using rqat::generation::GenerationRequest;
using rqat::generation::GenerationResult;
using rqat::generation::SamplingParams;
using rqat::model::CausalLM;
using rqat::model::Family;

namespace {

// ---------------------------------------------------------------- helpers

at::Tensor row_from_probs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return at::tensor(logits, at::kFloat);
}

std::vector<int32_t> sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The independent reference: the full forward over the whole sequence at every step, argmax of the
// last position, and log_softmax of it for the log-probability.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Reference naive_greedy(CausalLM& model, const std::vector<int32_t>& prompt,
                       int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  Reference ref;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    auto ids = at::tensor(seq, at::kLong).unsqueeze(0);
    auto last = model.forward(ids)[0][-1];
    const int64_t tok = last.argmax().item<int64_t>();
    ref.tokens.push_back(static_cast<int32_t>(tok));
    ref.logprobs.push_back(at::log_softmax(last, 0)[tok].item<float>());
    seq.push_back(tok);
  }
  return ref;
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int64_t max_new_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_new_tokens = max_new_tokens;
  return r;
}

GenerationRequest sampled_request(std::vector<int32_t> prompt, uint64_t seed, int n,
                                  int64_t max_new_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.seed = seed;
  r.num_samples = n;
  r.params.temperature = 0.9;
  r.params.top_k = 40;
  r.params.top_p = 0.95;
  r.params.max_new_tokens = max_new_tokens;
  return r;
}

// A test tokenizer: ids below 90 are one lowercase letter each ('a' + id % 26), ids 90.. are
// special tokens "<sN>". decode = concatenation of token_bytes.
class LetterTokenizer : public rqat::tokenizer::Tokenizer {
 public:
  std::vector<rqat::tokenizer::TokenId> encode(std::string_view text, bool) const override {
    std::vector<rqat::tokenizer::TokenId> out;
    for (char c : text) out.push_back(c - 'a');
    return out;
  }
  std::string decode(std::span<const rqat::tokenizer::TokenId> ids,
                     bool skip_special_tokens) const override {
    std::string out;
    for (auto id : ids) out += token_bytes(id, skip_special_tokens);
    return out;
  }
  int64_t vocab_size() const override { return 97; }
  std::optional<rqat::tokenizer::TokenId> token_to_id(std::string_view) const override {
    return std::nullopt;
  }
  std::string id_to_token(rqat::tokenizer::TokenId id) const override {
    return token_bytes(id, false);
  }
  bool is_special(rqat::tokenizer::TokenId id) const override { return id >= 90; }
  const std::vector<rqat::tokenizer::AddedToken>& added_tokens() const override { return added_; }
  const rqat::tokenizer::TokenizerConfig& config() const override { return config_; }
  std::string token_bytes(rqat::tokenizer::TokenId id, bool skip_special_tokens) const override {
    if (is_special(id)) return skip_special_tokens ? "" : "<s" + std::to_string(id) + ">";
    return std::string(1, static_cast<char>('a' + id % 26));
  }

 private:
  std::vector<rqat::tokenizer::AddedToken> added_;
  rqat::tokenizer::TokenizerConfig config_;
};

void require_same_tokens(const GenerationResult& a, const GenerationResult& b) {
  CHECK(a.token_ids == b.token_ids);
  CHECK(a.finish_reason == b.finish_reason);
  REQUIRE(a.logprobs.size() == b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    CHECK(std::abs(a.logprobs[i] - b.logprobs[i]) < 1e-4);
}

}  // namespace

// ---------------------------------------------------------------- sampler

TEST_CASE("draws are a documented hash of (seed, sample, position)") {
  using rqat::generation::sample_seed;
  using rqat::generation::sample_uniform;
  using rqat::generation::splitmix64;
  // splitmix64 reference values (Vigna's generator: state 0 -> first output).
  CHECK(splitmix64(0) == 0xE220A8397B1DCDAFULL);
  CHECK(sample_seed(7, 3) == splitmix64(splitmix64(7) + 3));
  CHECK(sample_seed(7, 3) != sample_seed(7, 4));
  CHECK(sample_seed(7, 0) != sample_seed(8, 0));
  std::set<double> seen;
  for (uint64_t position = 0; position < 1000; ++position) {
    const double u = sample_uniform(7, 3, position);
    const uint64_t bits = splitmix64(sample_seed(7, 3) ^ splitmix64(position));
    CHECK(u == static_cast<double>(bits >> 11) * 0x1.0p-53);
    CHECK((u >= 0.0 && u < 1.0));
    seen.insert(u);
  }
  CHECK(seen.size() == 1000);
  CHECK(sample_uniform(7, 3, 0) != sample_uniform(7, 4, 0));
  CHECK(sample_uniform(7, 3, 0) != sample_uniform(8, 3, 0));
}

TEST_CASE("greedy takes the argmax, ties to the lowest id, and reports log_softmax") {
  auto logits = at::tensor(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f, 1.0f});
  SamplingParams greedy;
  greedy.temperature = 0;
  const auto choice = rqat::generation::sample_token(logits, greedy, 0.5);
  CHECK(choice.token == 1);
  CHECK(choice.token == logits.argmax().item<int64_t>());
  CHECK(std::abs(choice.logprob - at::log_softmax(logits, 0)[1].item<float>()) < 1e-6);
  CHECK(rqat::generation::kept_tokens(logits, greedy) == std::vector<int32_t>{1});
}

TEST_CASE("top-k = 1 sampling equals greedy; logprobs equal log_softmax of the raw logits") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto rows = at::randn({64, 301}, gen) * 3;
  SamplingParams greedy, top1, hot;
  greedy.temperature = 0;
  top1.temperature = 1.7;
  top1.top_k = 1;
  hot.temperature = 1.3;
  hot.top_p = 0.9;
  hot.min_p = 0.01;
  auto logp = at::log_softmax(rows, 1);
  for (int64_t b = 0; b < rows.size(0); ++b) {
    const auto u = [b](uint64_t i) { return rqat::generation::sample_uniform(1, 0, 2 * b + i); };
    const auto a = rqat::generation::sample_token(rows[b], greedy, u(0));
    const auto k = rqat::generation::sample_token(rows[b], top1, u(0));
    CHECK(a.token == k.token);
    CHECK(std::abs(k.logprob - logp[b][k.token].item<float>()) < 1e-5);
    const auto h =
        rqat::generation::sample_token(rows[b], hot, u(1));  // the logprob ignores T and filters
    CHECK(std::abs(h.logprob - logp[b][h.token].item<float>()) < 1e-5);
  }
}

TEST_CASE("top-p keeps the smallest prefix with mass >= top_p") {
  // ids 0..4 hold probabilities 0.15, 0.5, 0.05, 0.2, 0.1: sorted order 1, 3, 0, 4, 2.
  auto logits = row_from_probs({0.15, 0.5, 0.05, 0.2, 0.1});
  SamplingParams p;
  auto kept = [&](double top_p) {
    p.top_p = top_p;
    return rqat::generation::kept_tokens(logits, p);
  };
  CHECK(kept(0.3) == std::vector<int32_t>{1});  // 0.5 alone already covers 0.3
  CHECK(kept(0.45) == std::vector<int32_t>{1});
  CHECK(kept(0.6) == std::vector<int32_t>{1, 3});
  CHECK(kept(0.75) == std::vector<int32_t>{1, 3, 0});
  CHECK(kept(0.9) == std::vector<int32_t>{1, 3, 0, 4});
  CHECK(kept(0.99) == std::vector<int32_t>{1, 3, 0, 4, 2});
  CHECK(kept(1e-9) == std::vector<int32_t>{1});  // never fewer than one token
  // After top-k = 3 the survivors carry 0.85: renormalized, 0.5 / 0.85 = 0.59 and 0.7 / 0.85 =
  // 0.82.
  p.top_k = 3;
  CHECK(kept(0.8) == std::vector<int32_t>{1, 3});
  CHECK(kept(0.85) == std::vector<int32_t>{1, 3, 0});
  // Temperature comes first: T = 2 flattens to sqrt(p) renormalized (0.387, 0.707, ...), so 0.6
  // needs more tokens than at T = 1.
  p.top_k = 0;
  p.temperature = 2.0;
  CHECK(kept(0.6) == std::vector<int32_t>{1, 3, 0});
}

TEST_CASE("top-p agrees with transformers' TopPLogitsWarper formula on random rows") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (int trial = 0; trial < 200; ++trial) {
    auto logits = at::randn({50}, gen) * 2;
    const double top_p = 0.05 + 0.9 * at::rand({1}, gen).item<double>();
    // TopPLogitsWarper: sort ascending, cumulative softmax, remove where cumsum <= 1 - top_p, keep
    // the last.
    auto [sorted_logits, sorted_idx] = logits.sort(/*dim=*/0, /*descending=*/false);
    auto cum = sorted_logits.softmax(0).cumsum(0);
    auto remove = cum <= (1 - top_p);
    remove[-1] = false;
    std::vector<int32_t> expected;
    for (int64_t i = 0; i < 50; ++i) {
      if (!remove[i].item<bool>())
        expected.push_back(static_cast<int32_t>(sorted_idx[i].item<int64_t>()));
    }
    // Skip rows where the boundary is within float noise of top_p.
    auto gap = (cum - (1 - top_p)).abs().min().item<double>();
    if (gap < 1e-5) continue;
    SamplingParams p;
    p.top_p = top_p;
    INFO("trial " << trial << " top_p " << top_p);
    CHECK(sorted(rqat::generation::kept_tokens(logits, p)) == sorted(expected));
  }
}

TEST_CASE("top-k keeps ties at the boundary; min-p keeps p >= min_p * p_max") {
  auto logits = at::tensor(std::vector<float>{1.0f, 3.0f, 2.0f, 2.0f, 0.0f});
  SamplingParams p;
  p.top_k = 2;  // 3.0, then 2.0 twice (both kept, as transformers' TopKLogitsWarper)
  CHECK(rqat::generation::kept_tokens(logits, p) == std::vector<int32_t>{1, 2, 3});
  p.top_k = 0;
  auto probs = row_from_probs({0.15, 0.5, 0.05, 0.2, 0.1});
  p.min_p = 0.25;  // cut 0.125
  CHECK(rqat::generation::kept_tokens(probs, p) == std::vector<int32_t>{1, 3, 0});
  p.min_p = 0.35;  // cut 0.175
  CHECK(rqat::generation::kept_tokens(probs, p) == std::vector<int32_t>{1, 3});
  p.min_p = 1.0;
  CHECK(rqat::generation::kept_tokens(probs, p) == std::vector<int32_t>{1});
  p.min_p = 0.0;
  CHECK(rqat::generation::kept_tokens(probs, p).size() == 5);
}

TEST_CASE(
    "sampled frequencies match softmax(logits / T) and the filtered renormalized distribution") {
  // N draws; each frequency is within 5 standard deviations sqrt(p (1 - p) / N) of its probability
  // (a false failure has probability < 1e-5 over all checks; the seed is fixed anyway).
  constexpr int kDraws = 40000;
  auto logits = at::tensor(std::vector<float>{0.3f, -1.0f, 1.2f, 0.0f, 2.0f, -0.5f});
  struct Case {
    double temperature;
    int64_t top_k;
  };
  for (const auto c : {Case{0.7, 0}, Case{1.0, 0}, Case{2.5, 0}, Case{1.0, 3}}) {
    INFO("T = " << c.temperature << " top_k = " << c.top_k);
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    auto expected = at::softmax(logits / c.temperature, 0);
    if (c.top_k > 0) {
      auto keep = logits >= std::get<0>(logits.topk(c.top_k)).min();
      expected = expected * keep;
      expected = expected / expected.sum();
    }
    std::vector<int> counts(6, 0);
    for (int i = 0; i < kDraws; ++i) {
      const double u = rqat::generation::sample_uniform(42, static_cast<uint64_t>(c.top_k), i);
      ++counts[rqat::generation::sample_token(logits, p, u).token];
    }
    for (int t = 0; t < 6; ++t) {
      const double prob = expected[t].item<double>();
      const double freq = static_cast<double>(counts[t]) / kDraws;
      INFO("token " << t << " p = " << prob << " freq = " << freq);
      CHECK(std::abs(freq - prob) <= 5 * std::sqrt(prob * (1 - prob) / kDraws) + 1e-12);
    }
  }
}

TEST_CASE("sampling parameters out of range are one-line errors") {
  auto logits = at::zeros({4});
  SamplingParams p;
  p.top_p = 0;
  rqat::test::require_error([&] { rqat::generation::kept_tokens(logits, p); }, {"top_p"});
  p = SamplingParams{};
  p.top_k = -1;
  rqat::test::require_error([&] { rqat::generation::kept_tokens(logits, p); }, {"top_k"});
  p = SamplingParams{};
  p.min_p = 1.5;
  rqat::test::require_error([&] { rqat::generation::kept_tokens(logits, p); }, {"min_p"});
  auto nan_logits = at::full({4}, std::nanf(""));
  rqat::test::require_error(
      [&] { rqat::generation::sample_token(nan_logits, SamplingParams{}, 0.5); }, {"finite"});
}

// ---------------------------------------------------------------- engine

TEST_CASE("greedy engine output equals the naive full-forward argmax loop") {
  for (const auto& [family, tied] :
       {std::pair{Family::kQwen2, false}, std::pair{Family::kQwen3, true},
        std::pair{Family::kLlama, false}}) {
    INFO(rqat::enum_name(family));
    auto model = rqat::test::random_tiny_model(family, tied, 3);
    std::vector<GenerationRequest> requests;
    const std::vector<int64_t> lengths{3, 9, 1, 14};
    for (size_t i = 0; i < lengths.size(); ++i)
      requests.push_back(greedy_request(rqat::test::random_tokens(lengths[i], 10 + i), 20));
    for (const int64_t max_batch : {int64_t{1}, int64_t{2}, int64_t{16}}) {
      INFO("max_batch " << max_batch);
      GenerationEngine engine(*model, nullptr, EngineOptions{max_batch});
      const auto results = engine.generate(requests);
      REQUIRE(results.size() == requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        const auto ref = naive_greedy(*model, requests[i].prompt_ids, 20);
        CHECK(results[i].request_index == i);
        CHECK(results[i].token_ids == ref.tokens);
        CHECK(results[i].finish_reason == FinishReason::kLength);
        REQUIRE(results[i].logprobs.size() == ref.logprobs.size());
        for (size_t t = 0; t < ref.logprobs.size(); ++t)
          CHECK(std::abs(results[i].logprobs[t] - ref.logprobs[t]) < 1e-4);
      }
    }
  }
}

TEST_CASE("sampled output is reproducible and independent of batch size and batch composition") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true, 4);
  const auto a = sampled_request(rqat::test::random_tokens(6, 21), 1234, 3, 24);
  const auto b = sampled_request(rqat::test::random_tokens(11, 22), 99, 2, 17);
  GenerationRequest c = sampled_request(rqat::test::random_tokens(4, 23), 5, 1, 30);
  c.params.top_p = 1.0;
  c.params.top_k = 0;
  c.params.min_p = 0.05;
  c.params.temperature = 1.4;

  GenerationEngine reference_engine(*model, nullptr, EngineOptions{16});
  const auto reference = reference_engine.generate({a, b, c});
  REQUIRE(reference.size() == 6);
  // Samples of one request differ from each other (different generators).
  CHECK(reference[0].token_ids != reference[1].token_ids);

  for (const int64_t max_batch : {int64_t{1}, int64_t{3}, int64_t{16}}) {
    INFO("max_batch " << max_batch);
    GenerationEngine engine(*model, nullptr, EngineOptions{max_batch});
    const auto again = engine.generate({a, b, c});
    REQUIRE(again.size() == reference.size());
    for (size_t i = 0; i < again.size(); ++i) require_same_tokens(again[i], reference[i]);
  }
  // Other prompts around it, in another order: request a's samples are unchanged.
  GenerationEngine engine(*model, nullptr, EngineOptions{4});
  const auto mixed = engine.generate({c, greedy_request(rqat::test::random_tokens(13, 24), 9), a});
  REQUIRE(mixed.size() == 5);
  for (int s = 0; s < 3; ++s) {
    CHECK(mixed[2 + s].request_index == 2);
    require_same_tokens(mixed[2 + s], reference[s]);
  }
  require_same_tokens(mixed[0], reference[5]);
}

TEST_CASE("continuous batching refills freed slots") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, false, 5);
  const std::vector<int64_t> max_new{3, 12, 1, 7, 15};
  std::vector<GenerationRequest> requests;
  int64_t total = 0;
  for (size_t i = 0; i < max_new.size(); ++i) {
    requests.push_back(greedy_request(
        rqat::test::random_tokens(2 + 3 * static_cast<int64_t>(i), 30 + i), max_new[i]));
    total += max_new[i];
  }
  GenerationEngine engine(*model, nullptr,
                          EngineOptions{2, 0, /*show_progress=*/true});  // line on stderr
  const auto results = engine.generate(requests);
  REQUIRE(results.size() == requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].token_ids == naive_greedy(*model, requests[i].prompt_ids, max_new[i]).tokens);
    CHECK(static_cast<int64_t>(results[i].token_ids.size()) == max_new[i]);
  }
  const auto& stats = engine.stats();
  CHECK(stats.generated_tokens == total);
  // Each sample's first token comes from its prefill; the rest from decode rows, at most 2 per
  // step.
  CHECK(stats.decode_rows == total - static_cast<int64_t>(requests.size()));
  CHECK(stats.decode_rows <= 2 * stats.decode_steps);
  // Refilling keeps both slots busy: far fewer steps than running the requests one after another.
  CHECK(stats.decode_steps < stats.decode_rows);
  // Schedule: r0 and r1 start; r0 ends after 2 steps, r2 ends on its first token, r3 joins (6
  // steps), r4 (14 steps) takes r3's slot after step 8: 22 steps in all.
  CHECK(stats.decode_steps == 22);
}

TEST_CASE("n samples share one prefill and match the unshared results") {
  auto model = rqat::test::random_tiny_model(Family::kQwen2, false, 6);
  const auto prompt = rqat::test::random_tokens(9, 40);
  const auto request = sampled_request(prompt, 77, 4, 16);

  GenerationEngine shared(*model, nullptr, EngineOptions{8});
  const auto with_sharing = shared.generate({request});
  CHECK(shared.stats().prefill_tokens == 9);
  CHECK(shared.stats().shared_prompts == 3);

  EngineOptions unshared_options{1};
  unshared_options.share_prompts = false;  // each sample prefilled anew
  GenerationEngine unshared(*model, nullptr, unshared_options);
  const auto without = unshared.generate({request});
  CHECK(unshared.stats().prefill_tokens == 4 * 9);
  CHECK(unshared.stats().shared_prompts == 0);

  // One and two at a time: later samples fork the prompt kept for them, still one prefill.
  GenerationEngine one_slot(*model, nullptr, EngineOptions{1});
  const auto one_at_a_time = one_slot.generate({request});
  CHECK(one_slot.stats().prefill_tokens == 9);
  CHECK(one_slot.stats().shared_prompts == 3);
  GenerationEngine two_slots(*model, nullptr, EngineOptions{2});
  const auto partly = two_slots.generate({request});
  CHECK(two_slots.stats().prefill_tokens == 9);

  REQUIRE(with_sharing.size() == 4);
  for (size_t s = 0; s < 4; ++s) {
    require_same_tokens(with_sharing[s], without[s]);
    require_same_tokens(one_at_a_time[s], without[s]);
    require_same_tokens(partly[s], without[s]);
  }
  auto single = request;
  single.num_samples = 1;
  GenerationEngine alone(*model, nullptr, EngineOptions{8});
  require_same_tokens(alone.generate({single}).front(), with_sharing.front());

  // Greedy samples of one request are all the same continuation.
  auto greedy = greedy_request(prompt, 10);
  greedy.num_samples = 3;
  const auto g = shared.generate({greedy});
  CHECK(g[0].token_ids == g[1].token_ids);
  CHECK(g[0].token_ids == g[2].token_ids);
  CHECK(g[0].token_ids == naive_greedy(*model, prompt, 10).tokens);
}

TEST_CASE("stop tokens and stop strings end a sample; text skips special tokens and is cut") {
  auto model = rqat::test::random_tiny_model(Family::kQwen3, true, 7);
  auto tokenizer = std::make_shared<LetterTokenizer>();
  const auto prompt = rqat::test::random_tokens(5, 50);
  GenerationEngine engine(*model, tokenizer, EngineOptions{4});
  const auto full = engine.generate({greedy_request(prompt, 40)}).front();
  REQUIRE(full.token_ids.size() == 40);
  CHECK(full.text == tokenizer->decode(full.token_ids, true));

  SECTION("stop token") {
    const size_t at = 6;
    const int32_t stop = full.token_ids[at];
    const size_t first =
        std::find(full.token_ids.begin(), full.token_ids.end(), stop) - full.token_ids.begin();
    auto req = greedy_request(prompt, 40);
    req.params.stop_token_ids = {1000, stop};
    const auto r = engine.generate({req}).front();
    CHECK(r.finish_reason == FinishReason::kStopToken);
    CHECK(r.token_ids ==
          std::vector<int32_t>(full.token_ids.begin(), full.token_ids.begin() + first + 1));
    CHECK(r.logprobs.size() == r.token_ids.size());
    // The stop token itself is not part of the text.
    CHECK(r.text == tokenizer->decode(std::span<const int32_t>(r.token_ids).first(first), true));
  }
  SECTION("stop string spanning tokens") {
    // Bytes of the generated tokens (special ones are empty); take 3 bytes from the middle.
    std::string bytes;
    std::vector<size_t> end_of_token;
    for (auto id : full.token_ids) {
      bytes += tokenizer->token_bytes(id, true);
      end_of_token.push_back(bytes.size());
    }
    REQUIRE(bytes.size() > 12);
    const std::string stop = bytes.substr(8, 3);
    const size_t pos = bytes.find(stop);
    const size_t last =
        std::lower_bound(end_of_token.begin(), end_of_token.end(), pos + stop.size()) -
        end_of_token.begin();
    auto req = greedy_request(prompt, 40);
    req.params.stop_strings = {"zzzzzzzz", stop};
    const auto r = engine.generate({req}).front();
    INFO("stop '" << stop << "' in '" << bytes << "'");
    CHECK(r.finish_reason == FinishReason::kStopString);
    CHECK(r.token_ids ==
          std::vector<int32_t>(full.token_ids.begin(), full.token_ids.begin() + last + 1));
    CHECK(r.text == bytes.substr(0, pos));
  }
  SECTION("special tokens are skipped in the text") {
    LetterTokenizer t;
    const std::vector<int32_t> ids{0, 95, 1, 92};
    CHECK(t.decode(ids, true) == "ab");
  }
}

TEST_CASE("max_new_tokens 0 and 1") {
  auto model = rqat::test::random_tiny_model(Family::kQwen2, false, 8);
  const auto prompt = rqat::test::random_tokens(7, 60);
  GenerationEngine engine(*model, nullptr, EngineOptions{4});
  auto zero = engine.generate({greedy_request(prompt, 0)});
  REQUIRE(zero.size() == 1);
  CHECK(zero[0].token_ids.empty());
  CHECK(zero[0].logprobs.empty());
  CHECK(zero[0].finish_reason == FinishReason::kLength);
  CHECK(engine.stats().prefill_calls == 0);

  auto one = engine.generate({greedy_request(prompt, 1), sampled_request(prompt, 3, 2, 1)});
  REQUIRE(one.size() == 3);
  CHECK(one[0].token_ids == naive_greedy(*model, prompt, 1).tokens);
  CHECK(one[1].token_ids.size() == 1);
  CHECK(one[2].token_ids.size() == 1);
  CHECK(engine.stats().decode_steps == 0);
}

TEST_CASE("generation errors are one line") {
  auto model = rqat::test::random_tiny_model(Family::kLlama, true, 9);
  GenerationEngine engine(*model, nullptr, EngineOptions{4, /*max_seq_len=*/16});
  rqat::test::require_error([&] { engine.generate({greedy_request({}, 4)}); },
                            {"request 0", "empty prompt"});
  rqat::test::require_error(
      [&] {
        engine.generate(
            {greedy_request({1, 2}, 3), greedy_request(rqat::test::random_tokens(10, 1), 7)});
      },
      {"request 1", "10", "max_new_tokens 7", "max_seq_len 16"});
  auto with_stop = greedy_request({1, 2}, 3);
  with_stop.params.stop_strings = {"x"};
  rqat::test::require_error([&] { engine.generate({with_stop}); }, {"stop strings", "tokenizer"});
  auto bad_p = greedy_request({1, 2}, 3);
  bad_p.params.top_p = 1.5;
  rqat::test::require_error([&] { engine.generate({bad_p}); }, {"request 0", "top_p"});
  rqat::test::require_error(
      [&] {
        engine.generate({greedy_request({1, 500}, 3)});
      },
      {"500", "vocabulary"});
  rqat::test::require_error([&] { GenerationEngine(*model, nullptr, EngineOptions{0}); },
                            {"max_batch"});
  // Exactly at the limit is fine.
  CHECK(engine.generate({greedy_request(rqat::test::random_tokens(10, 1), 6)})
            .front()
            .token_ids.size() == 6);
}
