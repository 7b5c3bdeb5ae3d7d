#include "data/training_batches.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "io/error.h"

namespace rqat::data {

namespace {

// Targets a sequence can train: mask[t] for t >= 1 (token 0 has no context).
int64_t trainable_targets(const std::vector<uint8_t>& mask) {
  int64_t n = 0;
  for (size_t t = 1; t < mask.size(); ++t) n += mask[t] != 0;
  return n;
}

int64_t count_ones(const uint8_t* begin, const uint8_t* end) {
  return std::count_if(begin, end, [](uint8_t m) { return m != 0; });
}

// Adds a sequence to the set, or counts it as dropped when it has nothing to learn.
void add_sequence(SequenceSet& set, TrainingSequence sequence) {
  const int64_t targets = trainable_targets(sequence.loss_mask);
  const auto length = static_cast<int64_t>(sequence.tokens.size());
  if (targets == 0) {
    set.truncation.no_target_sequences += 1;
    set.truncation.dropped_tokens += length;
    set.truncation.dropped_target_tokens +=
        count_ones(sequence.loss_mask.data(), sequence.loss_mask.data() + length);
    return;
  }
  set.total_tokens += length;
  set.target_tokens += targets;
  set.sequences.push_back(std::move(sequence));
}

void build_packed(const TokenizedDataset& data, const SequenceOptions& options, SequenceSet& set) {
  // One stream of every document (and separator), then cut; the stream of a large corpus is a
  // few bytes per token, far below the model's activations.
  std::vector<int64_t> tokens;
  std::vector<uint8_t> mask;
  tokens.reserve(static_cast<size_t>(data.total_tokens) + data.documents.size());
  mask.reserve(tokens.capacity());
  for (const auto& doc : data.documents) {
    if (doc.tokens.empty()) {
      set.truncation.empty_documents += 1;
      continue;
    }
    tokens.insert(tokens.end(), doc.tokens.begin(), doc.tokens.end());
    mask.insert(mask.end(), doc.loss_mask.begin(), doc.loss_mask.end());
    if (options.separator_id && doc.tokens.back() != *options.separator_id) {
      tokens.push_back(*options.separator_id);
      mask.push_back(1);
    }
  }
  const auto total = static_cast<int64_t>(tokens.size());
  for (int64_t start = 0; start < total; start += options.max_length) {
    const int64_t end = std::min(total, start + options.max_length);
    if (end - start < 2) {  // a lone last token: nothing to predict it from
      set.truncation.dropped_tokens += end - start;
      set.truncation.dropped_target_tokens += count_ones(mask.data() + start, mask.data() + end);
      continue;
    }
    add_sequence(set, {std::vector<int64_t>(tokens.begin() + start, tokens.begin() + end),
                       std::vector<uint8_t>(mask.begin() + start, mask.begin() + end)});
  }
}

void build_bucketed(const TokenizedDataset& data, const SequenceOptions& options,
                    SequenceSet& set) {
  for (const auto& doc : data.documents) {
    const auto length = static_cast<int64_t>(doc.tokens.size());
    if (length < 2) {
      set.truncation.empty_documents += 1;
      set.truncation.dropped_tokens += length;
      set.truncation.dropped_target_tokens +=
          count_ones(doc.loss_mask.data(), doc.loss_mask.data() + length);
      continue;
    }
    // The first max_length tokens: the prompt stays whole and the response loses its end, the
    // same text a generation with this context length could have produced.
    const int64_t kept = std::min(length, options.max_length);
    if (kept < length) {
      set.truncation.truncated_documents += 1;
      set.truncation.dropped_tokens += length - kept;
      set.truncation.dropped_target_tokens +=
          count_ones(doc.loss_mask.data() + kept, doc.loss_mask.data() + length);
    }
    add_sequence(set, {std::vector<int64_t>(doc.tokens.begin(), doc.tokens.begin() + kept),
                       std::vector<uint8_t>(doc.loss_mask.begin(), doc.loss_mask.begin() + kept)});
  }
}

// splitmix64's finalizer: spreads (seed, epoch) pairs over the generator's seed space so that
// nearby seeds or epochs give unrelated streams.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform integer in [0, bound) by rejection: unbiased, and the same on every standard library.
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                         std::numeric_limits<uint64_t>::max() % bound;  // multiple of bound
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % bound;
}

template <class T>
void fisher_yates(std::vector<T>& items, std::mt19937_64& rng) {
  for (size_t i = items.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(draw_below(rng, i));
    std::swap(items[i - 1], items[j]);
  }
}

}  // namespace

SequenceSet build_sequences(const TokenizedDataset& data, const SequenceOptions& options) {
  if (options.max_length < 2)
    fail("sequence max_length must be >= 2 tokens, got {}", options.max_length);
  SequenceSet set;
  set.layout = options.layout;
  set.max_length = options.max_length;
  set.truncation.documents = static_cast<int64_t>(data.documents.size());
  if (options.layout == SequenceLayout::kPacked) {
    build_packed(data, options, set);
  } else {
    build_bucketed(data, options, set);
  }
  return set;
}

io::Json DataPosition::to_json() const {
  io::Json json;
  json["epoch"] = epoch;
  json["step_in_epoch"] = step_in_epoch;
  return json;
}

DataPosition DataPosition::from_json(const io::Json& json, const std::string& where) {
  if (!json.is_object()) fail("{}: expected an object with epoch and step_in_epoch", where);
  auto field = [&](const char* name) {
    if (!json.contains(name)) fail("{}: field '{}' is missing", where, name);
    const auto& value = json[name];
    if (!value.is_number_integer() || value.get<int64_t>() < 0)
      fail("{}: field '{}' must be a non-negative integer, got {}", where, name, value.dump());
    return value.get<int64_t>();
  };
  return DataPosition{field("epoch"), field("step_in_epoch")};
}

StepSampler::StepSampler(const SequenceSet& set, int64_t sequences_per_step, uint64_t seed,
                         int64_t bucket_window_steps)
    : layout_(set.layout),
      sequences_per_step_(sequences_per_step),
      seed_(seed),
      bucket_window_steps_(bucket_window_steps) {
  const auto n = static_cast<int64_t>(set.sequences.size());
  if (sequences_per_step < 1 || sequences_per_step > n)
    fail(
        "--batch-size {} sequences per step: must be within 1..{} (the data gives {} sequences "
        "of at most {} tokens)",
        sequences_per_step, n, n, set.max_length);
  if (bucket_window_steps < 1) fail("bucket window must be >= 1 step, got {}", bucket_window_steps);
  lengths_.reserve(set.sequences.size());
  for (const auto& s : set.sequences) lengths_.push_back(static_cast<int64_t>(s.tokens.size()));
  steps_per_epoch_ = n / sequences_per_step;
}

std::vector<std::vector<int64_t>> StepSampler::epoch_steps(int64_t epoch) const {
  std::mt19937_64 rng(mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch))));
  std::vector<int64_t> order(lengths_.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  fisher_yates(order, rng);
  order.resize(static_cast<size_t>(steps_per_epoch_ * sequences_per_step_));  // drop the tail

  const auto b = static_cast<size_t>(sequences_per_step_);
  std::vector<std::vector<int64_t>> steps;
  steps.reserve(static_cast<size_t>(steps_per_epoch_));
  if (layout_ == SequenceLayout::kPacked) {
    for (size_t start = 0; start < order.size(); start += b)
      steps.emplace_back(order.begin() + start, order.begin() + start + b);
    return steps;
  }
  const size_t window = b * static_cast<size_t>(bucket_window_steps_);
  for (size_t start = 0; start < order.size(); start += window) {
    const auto first = order.begin() + start;
    const auto last = order.begin() + std::min(order.size(), start + window);
    std::stable_sort(first, last, [&](int64_t x, int64_t y) { return lengths_[x] < lengths_[y]; });
    std::vector<std::vector<int64_t>> window_steps;
    for (auto it = first; it != last; it += b) window_steps.emplace_back(it, it + b);
    // Without this, every window would run from short to long sequences: a periodic pattern in
    // the step's token count that the optimizer (and the loss curve) would see.
    fisher_yates(window_steps, rng);
    for (auto& s : window_steps) steps.push_back(std::move(s));
  }
  return steps;
}

std::vector<int64_t> StepSampler::next_step() {
  if (cached_epoch_ != position_.epoch) {
    cached_steps_ = epoch_steps(position_.epoch);
    cached_epoch_ = position_.epoch;
  }
  auto step = cached_steps_[static_cast<size_t>(position_.step_in_epoch)];
  if (++position_.step_in_epoch == steps_per_epoch_) {
    position_.epoch += 1;
    position_.step_in_epoch = 0;
  }
  return step;
}

void StepSampler::restore(const DataPosition& position) {
  if (position.epoch < 0 || position.step_in_epoch < 0 ||
      position.step_in_epoch >= steps_per_epoch_)
    fail(
        "data position epoch {} step {} is outside the data: an epoch has {} steps of {} "
        "sequences (was the checkpoint made with other data or --batch-size?)",
        position.epoch, position.step_in_epoch, steps_per_epoch_, sequences_per_step_);
  position_ = position;
}

TokenBatch collate(const SequenceSet& set, std::span<const int64_t> indices, int64_t pad_id) {
  if (indices.empty()) fail("collate: no sequences given");
  const auto n = static_cast<int64_t>(set.sequences.size());
  int64_t longest = 0;
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) fail("collate: sequence index {} is outside 0..{}", i, n - 1);
    longest = std::max(longest, static_cast<int64_t>(set.sequences[i].tokens.size()));
  }
  const auto rows = static_cast<int64_t>(indices.size());
  auto input_ids = at::full({rows, longest}, pad_id, at::kLong);
  auto attention = at::zeros({rows, longest}, at::kLong);
  auto loss = at::zeros({rows, longest}, at::kBool);
  auto ids_a = input_ids.accessor<int64_t, 2>();
  auto att_a = attention.accessor<int64_t, 2>();
  auto loss_a = loss.accessor<bool, 2>();
  TokenBatch batch;
  bool padded = false;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& s = set.sequences[indices[r]];
    const auto length = static_cast<int64_t>(s.tokens.size());
    const int64_t offset = longest - length;
    padded = padded || offset > 0;
    for (int64_t t = 0; t < length; ++t) {
      ids_a[r][offset + t] = s.tokens[t];
      att_a[r][offset + t] = 1;
      loss_a[r][offset + t] = t > 0 && s.loss_mask[t] != 0;
      batch.target_tokens += (t > 0 && s.loss_mask[t] != 0) ? 1 : 0;
    }
    batch.tokens += length;
  }
  batch.input_ids = input_ids;
  if (padded) batch.attention_mask = attention;
  batch.loss_mask = loss;
  return batch;
}

int64_t count_target_tokens(const SequenceSet& set, std::span<const int64_t> indices) {
  const auto n = static_cast<int64_t>(set.sequences.size());
  int64_t total = 0;
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) fail("sequence index {} is outside 0..{}", i, n - 1);
    total += trainable_targets(set.sequences[i].loss_mask);
  }
  return total;
}

std::string format_truncation_report(const SequenceSet& set) {
  const auto& t = set.truncation;
  const int64_t all_targets = set.target_tokens + t.dropped_target_tokens;
  const double dropped_percent =
      all_targets > 0 ? 100.0 * static_cast<double>(t.dropped_target_tokens) / all_targets : 0.0;
  std::string line = fmt::format("{} documents", t.documents);
  if (t.empty_documents > 0) line += fmt::format(" ({} empty)", t.empty_documents);
  if (set.layout == SequenceLayout::kPacked) {
    line +=
        fmt::format(" packed into {} sequences of {} tokens", set.sequences.size(), set.max_length);
  } else {
    line += fmt::format(" -> {} sequences (one per document), {} truncated at {} tokens",
                        set.sequences.size(), t.truncated_documents, set.max_length);
  }
  line += fmt::format(" ({:.1f}% of target tokens dropped)", dropped_percent);
  if (t.no_target_sequences > 0)
    line += fmt::format(", {} sequences without targets skipped", t.no_target_sequences);
  line += fmt::format(", {} tokens, {} targets", set.total_tokens, set.target_tokens);
  return line;
}

int64_t padding_token_id(const tokenizer::Tokenizer& tokenizer) {
  for (const auto& token : {tokenizer.config().pad_token, tokenizer.config().eos_token})
    if (token)
      if (auto id = tokenizer.token_to_id(*token)) return *id;
  return 0;  // padding is never attended to nor scored: any valid id works
}

}  // namespace rqat::data
