// Training data for qat-sft / qat-kd: a TokenizedDataset cut into fixed-budget sequences, a
// deterministic order of sequences per optimizer step, and padded micro-batches.
//
// Layouts (docs/training-data.md):
//   - packed: documents are concatenated in file order (a separator such as EOS after each) and
//     cut into chunks of exactly max_length tokens; no padding and no truncation, but a chunk
//     starts mid-document (its first token has no context and is never a target);
//   - bucketed: one sequence per document, truncated to max_length; steps group sequences of
//     similar length so that padding stays small.
//
// Mask convention (as TokenizedDocument::loss_mask): mask[t] = 1 means token t is a prediction
// target (the loss of predicting it from tokens < t counts). Position 0 of a sequence is never
// scored, so every count of "target tokens" here excludes it.
//
// Shuffling is a function of (seed, epoch) only, and the step's sequence list is the same in
// every process, so resuming from a DataPosition or changing the number of processes (each takes
// its share of a step) does not change which sequences an optimizer step sees.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/text_dataset.h"
#include "io/enum_names.h"
#include "io/json_file.h"

namespace rqat::data {

enum class SequenceLayout { kPacked, kBucketed, kCount };
constexpr EnumNames<SequenceLayout> enum_names(SequenceLayout) { return {"pack", "bucket"}; }

struct SequenceOptions {
  SequenceLayout layout = SequenceLayout::kPacked;
  int64_t max_length = 2048;  // tokens per sequence (> 1)
  // Packed: appended after each document as a target (e.g. EOS) unless the document already ends
  // with it, so the model learns where a document stops and the next unrelated one starts.
  std::optional<int64_t> separator_id;
};

// What build_sequences could not use. Invariant: sequences' tokens + dropped_tokens = the
// dataset's tokens + the separators added.
struct TruncationStats {
  int64_t documents = 0;              // documents in the dataset (empty ones included)
  int64_t empty_documents = 0;        // without tokens (packed) or with < 2 tokens (bucketed)
  int64_t truncated_documents = 0;    // bucketed: documents longer than max_length
  int64_t dropped_tokens = 0;         // tokens in no sequence (truncated tails, skipped sequences)
  int64_t dropped_target_tokens = 0;  // of which targets
  // Sequences left out because no token after their first is a target (e.g. a chat document
  // whose prompt alone fills max_length): they would cost compute and teach nothing.
  int64_t no_target_sequences = 0;
};

struct TrainingSequence {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> loss_mask;  // 1 = prediction target, as in TokenizedDocument
};

struct SequenceSet {
  std::vector<TrainingSequence> sequences;
  TruncationStats truncation;
  int64_t total_tokens = 0;   // tokens over all sequences
  int64_t target_tokens = 0;  // target tokens over all sequences, position 0 excluded
  SequenceLayout layout = SequenceLayout::kPacked;
  int64_t max_length = 0;
};

// packed: documents concatenated in file order (+separator), cut into consecutive chunks of
//   exactly max_length tokens (the last partial chunk kept if it has >= 2 tokens); nothing is
//   truncated, truncated_documents = 0.
// bucketed: one sequence per document, its first max_length tokens (counted: truncated_documents,
//   dropped tokens and dropped target tokens); documents with < 2 tokens are skipped (counted as
//   empty_documents).
// Both: sequences without a target after position 0 are skipped (no_target_sequences).
SequenceSet build_sequences(const TokenizedDataset& data, const SequenceOptions& options);

// Where a StepSampler reads next; saved in training checkpoints.
struct DataPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  io::Json to_json() const;  // {"epoch": E, "step_in_epoch": S}
  // Errors name `where` (e.g. "checkpoint/trainer_state.json: data_position") and the field.
  static DataPosition from_json(const io::Json& json, const std::string& where);
  bool operator==(const DataPosition&) const = default;
};

// Deterministic order of sequences per optimizer step, independent of the number of processes:
// every process builds the same StepSampler and takes its share of each step's sequence list.
class StepSampler {
 public:
  // sequences_per_step: global batch (sequences per optimizer step), 1 <= it <=
  // set.sequences.size() (else an rqat::Error naming --batch-size and the counts). Epoch e's order
  // is a permutation drawn from (seed, e) alone, with a Fisher-Yates and bounded draws written here
  // over std::mt19937_64 (whose output the standard fixes, unlike std::shuffle's and
  // std::uniform_int_distribution's). The last partial step of an epoch is dropped.
  // Bucketed layout: within windows of `bucket_window_steps` steps of the permuted order,
  // sequences are sorted by length (stable) and cut into steps, and the window's steps are then
  // permuted (seeded): each step holds sequences of similar length (less padding) while the
  // order still changes every epoch.
  StepSampler(const SequenceSet& set, int64_t sequences_per_step, uint64_t seed,
              int64_t bucket_window_steps = 32);

  std::vector<int64_t> next_step();  // indices into set.sequences; advances (wrapping epochs)
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t sequences_per_step() const { return sequences_per_step_; }
  DataPosition position() const { return position_; }  // what next_step() reads next
  void restore(const DataPosition& position);          // rqat::Error if outside the data

  // Every step of one epoch, in order (for tests and for inspection).
  std::vector<std::vector<int64_t>> epoch_steps(int64_t epoch) const;

 private:
  std::vector<int64_t> lengths_;  // tokens of each sequence (bucketing key)
  SequenceLayout layout_;
  int64_t sequences_per_step_;
  uint64_t seed_;
  int64_t bucket_window_steps_;
  int64_t steps_per_epoch_;
  DataPosition position_;
  int64_t cached_epoch_ = -1;  // epoch whose steps are in cached_steps_
  std::vector<std::vector<int64_t>> cached_steps_;
};

// A padded micro-batch of sequences. LEFT padding, CausalLM's attention_mask convention (1 =
// token, 0 = left pad; positions count real tokens only). input_ids (B, T) int64 with T = the
// longest sequence, pad columns hold pad_id; attention_mask (B, T) int64, undefined when no row is
// padded; loss_mask (B, T) bool = target tokens (never on padding, never on a row's first token as
// it has no context); tokens = real tokens; target_tokens = loss_mask.sum(). CPU tensors.
struct TokenBatch {
  at::Tensor input_ids, attention_mask, loss_mask;
  int64_t tokens = 0, target_tokens = 0;
};
TokenBatch collate(const SequenceSet& set, std::span<const int64_t> indices, int64_t pad_id);

// Target tokens in the given sequences (position 0 excluded), for normalizing the loss over all
// micro-batches and processes of an optimizer step.
int64_t count_target_tokens(const SequenceSet& set, std::span<const int64_t> indices);

// One line, e.g. "1234 documents (3 empty) -> 1200 sequences (bucket, at most 512 tokens), 12
// truncated at 512 tokens (3.1% of target tokens dropped), 456789 tokens, 300000 targets".
std::string format_truncation_report(const SequenceSet& set);

// The id that pads training batches: the tokenizer's pad token, else its EOS, else 0 (padding is
// masked out of attention and loss, so any valid id works).
int64_t padding_token_id(const tokenizer::Tokenizer& tokenizer);

}  // namespace rqat::data
