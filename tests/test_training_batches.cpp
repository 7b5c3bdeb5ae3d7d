// Training sequences and step batches: packing and bucketing against hand-computed layouts and
// counts, the step sampler's determinism, epoch coverage, resume and bucketing's padding, and
// collate's left padding checked by hand and through a model (a left-padded batch scores exactly
// like its rows one at a time).
#include "catch.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "data/training_batches.h"
#include "io/error.h"
#include "test_util.h"
#include "train/token_nll.h"

namespace {

using namespace rqat::data;
using rqat::test::require_error;
using rqat::train::masked_next_token_nll;

struct Doc {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
};

TokenizedDataset make_dataset(const std::vector<Doc>& docs) {
  TokenizedDataset data;
  for (size_t i = 0; i < docs.size(); ++i) {
    REQUIRE(docs[i].tokens.size() == docs[i].mask.size());
    TokenizedDocument doc;
    doc.tokens.assign(docs[i].tokens.begin(), docs[i].tokens.end());
    doc.loss_mask = docs[i].mask;
    doc.index = i;
    data.total_tokens += static_cast<int64_t>(doc.tokens.size());
    for (auto m : doc.loss_mask) data.target_tokens += m;
    data.documents.push_back(std::move(doc));
  }
  return data;
}

// A dataset of `n` documents whose lengths are drawn by `length(rng)`, random ids and masks.
template <class LengthFn>
TokenizedDataset random_dataset(int n, uint64_t seed, LengthFn length) {
  std::mt19937_64 rng(seed);
  std::vector<Doc> docs;
  for (int i = 0; i < n; ++i) {
    Doc d;
    const int len = length(rng);
    for (int t = 0; t < len; ++t) {
      d.tokens.push_back(static_cast<int32_t>(rng() % 90));
      // The last token is always a target, so every document of >= 2 tokens has one.
      d.mask.push_back(static_cast<uint8_t>(t == len - 1 || rng() % 4 != 0));
    }
    docs.push_back(std::move(d));
  }
  return make_dataset(docs);
}

std::vector<int64_t> ids(std::initializer_list<int64_t> v) { return v; }
std::vector<uint8_t> mask(std::initializer_list<uint8_t> v) { return v; }

// Padding (pad slots) of a step: B x longest - sum of lengths.
int64_t step_padding(const SequenceSet& set, const std::vector<int64_t>& step) {
  int64_t longest = 0, sum = 0;
  for (auto i : step) {
    const auto len = static_cast<int64_t>(set.sequences[i].tokens.size());
    longest = std::max(longest, len);
    sum += len;
  }
  return longest * static_cast<int64_t>(step.size()) - sum;
}

}  // namespace

TEST_CASE("layout names parse; errors name the flag", "[batches]") {
  CHECK(rqat::parse_enum<SequenceLayout>("pack", "--layout") == SequenceLayout::kPacked);
  CHECK(rqat::parse_enum<SequenceLayout>("bucket", "--layout") == SequenceLayout::kBucketed);
  CHECK(std::string(rqat::enum_name(SequenceLayout::kBucketed)) == "bucket");
  require_error([] { rqat::parse_enum<SequenceLayout>("padded", "--layout"); },
                {"--layout", "padded"});
  require_error(
      [] {
        build_sequences(make_dataset({}), {SequenceLayout::kPacked, 1, {}});
      },
      {"max_length", "1"});
}

TEST_CASE("packing: documents + separator cut into chunks of max_length", "[batches]") {
  // Separator 9; document B already ends with it, C is empty, D is a chat-like document whose
  // first two tokens are prompt.
  const auto data = make_dataset({{{1, 2, 3}, {0, 1, 1}},
                                  {{4, 5, 9}, {1, 1, 1}},
                                  {{}, {}},
                                  {{6, 7, 8, 10, 11}, {0, 0, 1, 1, 1}}});
  SequenceOptions options;
  options.max_length = 4;
  options.separator_id = 9;
  const auto set = build_sequences(data, options);
  // Stream by hand: 1 2 3 9 | 4 5 9 6 | 7 8 10 11 | 9 (a lone last token is dropped).
  REQUIRE(set.sequences.size() == 3);
  CHECK(set.sequences[0].tokens == ids({1, 2, 3, 9}));
  CHECK(set.sequences[0].loss_mask == mask({0, 1, 1, 1}));
  CHECK(set.sequences[1].tokens == ids({4, 5, 9, 6}));
  CHECK(set.sequences[1].loss_mask == mask({1, 1, 1, 0}));
  CHECK(set.sequences[2].tokens == ids({7, 8, 10, 11}));
  CHECK(set.sequences[2].loss_mask == mask({0, 1, 1, 1}));
  CHECK(set.truncation.documents == 4);
  CHECK(set.truncation.empty_documents == 1);
  CHECK(set.truncation.truncated_documents == 0);
  CHECK(set.truncation.dropped_tokens == 1);
  CHECK(set.truncation.dropped_target_tokens == 1);
  CHECK(set.total_tokens == 12);
  CHECK(set.target_tokens == 3 + 2 + 3);  // position 0 of each chunk excluded
  CHECK(set.layout == SequenceLayout::kPacked);
  CHECK(set.max_length == 4);

  // Without a separator: 1 2 3 4 5 | 9 6 7 8 10 | 11 -> the last chunk is dropped (1 token).
  options.separator_id.reset();
  options.max_length = 5;
  const auto plain = build_sequences(data, options);
  REQUIRE(plain.sequences.size() == 2);
  CHECK(plain.sequences[0].tokens == ids({1, 2, 3, 4, 5}));
  CHECK(plain.sequences[1].tokens == ids({9, 6, 7, 8, 10}));
  CHECK(plain.sequences[1].loss_mask == mask({1, 0, 0, 1, 1}));
  CHECK(plain.truncation.dropped_tokens == 1);

  // A chunk with no target after its first token teaches nothing and is skipped.
  const auto prompts = make_dataset({{{1, 2, 3, 4, 5, 6, 7}, {0, 0, 0, 1, 1, 0, 0}}});
  options.max_length = 3;  // 1 2 3 | 4 5 6 | 7
  const auto skipped = build_sequences(prompts, options);
  REQUIRE(skipped.sequences.size() == 1);
  CHECK(skipped.sequences[0].tokens == ids({4, 5, 6}));
  CHECK(skipped.truncation.no_target_sequences == 1);
  CHECK(skipped.truncation.dropped_tokens == 3 + 1);
  CHECK(skipped.target_tokens == 1);
}

TEST_CASE("packing keeps every token in order (random documents)", "[batches]") {
  const auto data = random_dataset(40, 11, [](auto& rng) { return static_cast<int>(rng() % 50); });
  SequenceOptions options;
  options.max_length = 37;
  options.separator_id = 95;  // never drawn by random_dataset, so always appended
  const auto set = build_sequences(data, options);
  std::vector<int64_t> stream;
  int64_t separators = 0;
  for (const auto& d : data.documents) {
    if (d.tokens.empty()) continue;
    stream.insert(stream.end(), d.tokens.begin(), d.tokens.end());
    stream.push_back(95);
    ++separators;
  }
  std::vector<int64_t> joined;
  for (size_t i = 0; i < set.sequences.size(); ++i) {
    const auto& s = set.sequences[i];
    if (i + 1 < set.sequences.size()) CHECK(s.tokens.size() == 37);
    joined.insert(joined.end(), s.tokens.begin(), s.tokens.end());
  }
  // Random masks may leave a chunk without targets only with negligible probability; the
  // invariant below holds either way.
  CHECK(set.total_tokens + set.truncation.dropped_tokens == data.total_tokens + separators);
  if (set.truncation.no_target_sequences == 0) {
    CHECK(std::equal(joined.begin(), joined.end(), stream.begin()));
    CHECK(stream.size() - joined.size() == static_cast<size_t>(set.truncation.dropped_tokens));
  }
}

TEST_CASE("bucketing: one sequence per document, truncation counted", "[batches]") {
  const auto data = make_dataset({{{1, 2, 3, 4, 5}, {1, 1, 1, 1, 1}},
                                  {{7}, {1}},
                                  {{}, {}},
                                  {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 0, 1, 1, 1, 1, 1, 1, 0, 1}},
                                  {{3, 3, 3, 3, 3, 3, 3, 3}, {0, 0, 0, 0, 0, 0, 0, 1}}});
  SequenceOptions options;
  options.layout = SequenceLayout::kBucketed;
  options.max_length = 6;
  const auto set = build_sequences(data, options);
  REQUIRE(set.sequences.size() == 2);
  CHECK(set.sequences[0].tokens == ids({1, 2, 3, 4, 5}));
  CHECK(set.sequences[1].tokens == ids({1, 2, 3, 4, 5, 6}));
  CHECK(set.sequences[1].loss_mask == mask({0, 0, 1, 1, 1, 1}));
  const auto& t = set.truncation;
  CHECK(t.documents == 5);
  CHECK(t.empty_documents == 2);      // 1 token and 0 tokens
  CHECK(t.truncated_documents == 2);  // documents 3 and 4
  CHECK(t.no_target_sequences == 1);  // document 4's first 6 tokens are all prompt
  // Dropped: doc 1's token (a target), doc 3's tail 7 8 9 10 (3 targets), doc 4 whole (1 target).
  CHECK(t.dropped_tokens == 1 + 4 + 8);
  CHECK(t.dropped_target_tokens == 1 + 3 + 1);
  CHECK(set.total_tokens == 11);
  CHECK(set.target_tokens == 4 + 4);
  const auto report = format_truncation_report(set);
  INFO(report);
  CHECK(report.find("5 documents (2 empty)") != std::string::npos);
  CHECK(report.find("2 truncated at 6 tokens") != std::string::npos);
  // 5 dropped of 5 + 8 targets.
  CHECK(report.find(fmt::format("({:.1f}% of target tokens dropped)", 500.0 / 13)) !=
        std::string::npos);
  CHECK(report.find('\n') == std::string::npos);
}

TEST_CASE("step sampler: deterministic, seed-dependent, every sequence once per epoch",
          "[batches]") {
  const auto data =
      random_dataset(103, 3, [](auto& rng) { return 2 + static_cast<int>(rng() % 30); });
  for (auto layout : {SequenceLayout::kPacked, SequenceLayout::kBucketed}) {
    INFO(rqat::enum_name(layout));
    // One sequence per document in both cases; the sampler's behaviour follows set.layout.
    auto set = build_sequences(data, {SequenceLayout::kBucketed, 64, {}});
    set.layout = layout;
    REQUIRE(set.sequences.size() == 103);
    StepSampler a(set, 8, 42, 4), b(set, 8, 42, 4), c(set, 8, 43, 4);
    REQUIRE(a.steps_per_epoch() == 12);  // 103 / 8, the last 7 dropped
    std::vector<std::vector<int64_t>> epoch0, epoch1;
    bool seed_changes_order = false;
    for (int s = 0; s < 24; ++s) {
      const auto step = a.next_step();
      CHECK(step == b.next_step());
      seed_changes_order = seed_changes_order || step != c.next_step();
      CHECK(step.size() == 8);
      (s < 12 ? epoch0 : epoch1).push_back(step);
      if (s == 11) CHECK(a.position() == DataPosition{1, 0});  // wrapped
    }
    CHECK(seed_changes_order);
    CHECK(epoch0 != epoch1);  // a new permutation each epoch
    for (const auto& epoch : {epoch0, epoch1}) {
      std::set<int64_t> seen;
      for (const auto& step : epoch)
        for (auto i : step) {
          CHECK((i >= 0 && i < 103));
          seen.insert(i);
        }
      CHECK(seen.size() == 96);  // every index at most once: 12 x 8 distinct
    }
    CHECK(a.epoch_steps(0) == epoch0);
    CHECK(a.epoch_steps(1) == epoch1);
    if (layout == SequenceLayout::kBucketed) {
      // Windows of 4 steps: the steps are sorted by length inside a window, then shuffled, so
      // not every window may run from short to long.
      int sorted_windows = 0;
      for (const auto& epoch : {epoch0, epoch1})
        for (size_t w = 0; w < 12; w += 4) {
          std::vector<int64_t> longest;
          for (size_t s = w; s < w + 4; ++s) {
            int64_t m = 0;
            for (auto i : epoch[s])
              m = std::max(m, static_cast<int64_t>(set.sequences[i].tokens.size()));
            longest.push_back(m);
          }
          sorted_windows += std::is_sorted(longest.begin(), longest.end());
        }
      CHECK(sorted_windows < 6);
    }
  }
}

TEST_CASE("step sampler: restore(position()) continues the same sequence of steps", "[batches]") {
  const auto data =
      random_dataset(50, 5, [](auto& rng) { return 2 + static_cast<int>(rng() % 20); });
  const auto set = build_sequences(data, {SequenceLayout::kBucketed, 16, {}});
  StepSampler uninterrupted(set, 6, 7, 2);
  StepSampler first(set, 6, 7, 2);
  for (int s = 0; s < 19; ++s) CHECK(first.next_step() == uninterrupted.next_step());
  // Through JSON, as a checkpoint stores it.
  const auto saved = first.position().to_json();
  CHECK(saved.dump() == R"({"epoch":2,"step_in_epoch":3})");  // 8 steps per epoch: 19 = 2 x 8 + 3
  StepSampler resumed(set, 6, 7, 2);
  resumed.restore(DataPosition::from_json(saved, "state.json: data_position"));
  for (int s = 0; s < 20; ++s) CHECK(resumed.next_step() == uninterrupted.next_step());

  require_error([&] { resumed.restore({0, 8}); }, {"step 8", "8 steps"});
  require_error([&] { resumed.restore({-1, 0}); }, {"epoch -1"});
  require_error(
      [] {
        DataPosition::from_json(rqat::io::Json{{"epoch", 1}}, "state.json");
      },
      {"state.json", "step_in_epoch"});
  require_error(
      [] {
        DataPosition::from_json(rqat::io::Json{{"epoch", "1"}, {"step_in_epoch", 0}}, "s.json");
      },
      {"s.json", "'epoch'"});
  require_error([&] { StepSampler(set, 51, 1); }, {"--batch-size 51", "50"});
  require_error([&] { StepSampler(set, 0, 1); }, {"--batch-size 0"});
}

TEST_CASE("bucketed steps pad less than shuffled ones on skewed lengths", "[batches]") {
  // 85% short documents (8-40 tokens), 15% long ones (200-600): the shape of reasoning traces.
  const auto data = random_dataset(400, 9, [](auto& rng) {
    return rng() % 100 < 85 ? 8 + static_cast<int>(rng() % 33)
                            : 200 + static_cast<int>(rng() % 401);
  });
  auto bucketed = build_sequences(data, {SequenceLayout::kBucketed, 1024, {}});
  auto shuffled = bucketed;
  shuffled.layout = SequenceLayout::kPacked;  // the plain permutation, no length sorting
  StepSampler with_buckets(bucketed, 8, 1, 10), without(shuffled, 8, 1);
  int64_t padding_bucketed = 0, padding_shuffled = 0, real = 0;
  for (int s = 0; s < with_buckets.steps_per_epoch(); ++s) {
    const auto step = with_buckets.next_step();
    padding_bucketed += step_padding(bucketed, step);
    padding_shuffled += step_padding(shuffled, without.next_step());
    for (auto i : step) real += static_cast<int64_t>(bucketed.sequences[i].tokens.size());
  }
  INFO("padding bucketed " << padding_bucketed << ", shuffled " << padding_shuffled << ", real "
                           << real);
  CHECK(padding_bucketed * 4 < padding_shuffled);
  // The bucketed order still changes with the epoch.
  CHECK(with_buckets.epoch_steps(0) != with_buckets.epoch_steps(1));
}

TEST_CASE("collate: left padding, attention and loss masks by hand", "[batches]") {
  const auto data = make_dataset(
      {{{1, 2, 3}, {1, 1, 1}}, {{4, 5}, {0, 1}}, {{6, 7, 8, 9}, {0, 0, 1, 1}}, {{2, 2}, {1, 1}}});
  const auto set = build_sequences(data, {SequenceLayout::kBucketed, 8, {}});
  const std::vector<int64_t> rows{0, 1, 2};
  const auto batch = collate(set, rows, 0);
  const auto expect = [](std::vector<int64_t> v) {
    return at::tensor(v, at::kLong).reshape({3, 4});
  };
  CHECK(at::equal(batch.input_ids, expect({0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 9})));
  REQUIRE(batch.attention_mask.defined());
  CHECK(at::equal(batch.attention_mask, expect({0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1})));
  CHECK(batch.loss_mask.scalar_type() == at::kBool);
  CHECK(at::equal(batch.loss_mask, expect({0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1}).to(at::kBool)));
  CHECK(batch.tokens == 9);
  CHECK(batch.target_tokens == 5);
  CHECK(count_target_tokens(set, rows) == 5);

  const std::vector<int64_t> same_length{1, 3};
  const auto unpadded = collate(set, same_length, 0);
  CHECK_FALSE(unpadded.attention_mask.defined());
  CHECK(unpadded.target_tokens == 2);
  require_error([&] { collate(set, std::vector<int64_t>{7}, 0); }, {"7"});
}

TEST_CASE("collate: a left-padded batch scores like its rows alone through the model",
          "[batches]") {
  torch::NoGradGuard no_grad;
  auto model = rqat::test::random_tiny_model(rqat::model::Family::kQwen3, false, 3);
  const auto data =
      random_dataset(5, 17, [](auto& rng) { return 3 + static_cast<int>(rng() % 12); });
  const auto set = build_sequences(data, {SequenceLayout::kBucketed, 64, {}});
  std::vector<int64_t> rows(set.sequences.size());
  std::iota(rows.begin(), rows.end(), int64_t{0});
  const auto batch = collate(set, rows, 0);
  REQUIRE(batch.attention_mask.defined());
  const auto batched = masked_next_token_nll(model->forward(batch.input_ids, batch.attention_mask),
                                             batch.input_ids, batch.loss_mask);
  CHECK(batched.tokens == batch.target_tokens);

  double reference = 0;
  int64_t scored = 0;
  for (const auto& s : set.sequences) {
    const auto input = at::tensor(s.tokens, at::kLong).unsqueeze(0);
    const auto logp = at::log_softmax(model->forward(input).to(at::kDouble), -1);
    for (size_t t = 1; t < s.tokens.size(); ++t) {
      if (!s.loss_mask[t]) continue;
      reference -= logp[0][static_cast<int64_t>(t) - 1][s.tokens[t]].item<double>();
      ++scored;
    }
  }
  CHECK(scored == batch.target_tokens);
  CHECK(batched.sum.item<double>() == Approx(reference).epsilon(1e-5));
}
