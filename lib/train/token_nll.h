// Negative log-likelihood of token sequences under a CausalLM: the mean over target tokens of
// -log p(token_t | tokens_<t), and perplexity = exp(mean NLL).
//
// Target convention (shared with TokenizedDocument::loss_mask): position t of a row is scored
// when loss_mask[t] is set and t >= 1 (the first token of a row has no context and is never
// scored). Rows are right-padded; padding must carry mask 0, and with causal attention it cannot
// change the real positions' outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "data/text_dataset.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace rqat::train {

struct NllTotals {
  double sum_nll = 0.0;  // sum over scored tokens, in nats
  int64_t tokens = 0;    // scored tokens

  double mean() const { return tokens > 0 ? sum_nll / static_cast<double>(tokens) : 0.0; }
  double perplexity() const { return std::exp(mean()); }
  NllTotals& operator+=(const NllTotals& other) {
    sum_nll += other.sum_nll;
    tokens += other.tokens;
    return *this;
  }
};

// Sum of the next-token NLL of `input_ids` (B, T) over scored positions (loss_mask (B, T), bool
// or integer) given `logits` (B, T, V) in any float dtype; the softmax is taken in float32. The
// sum is a 0-dim float32 tensor that keeps the autograd graph, so a trainer can use it as its
// cross-entropy loss; the count is the number of scored positions.
struct MaskedNllSum {
  at::Tensor sum;
  int64_t tokens = 0;
};
MaskedNllSum masked_next_token_nll(const at::Tensor& logits, const at::Tensor& input_ids,
                                   const at::Tensor& loss_mask);

// Mean NLL of a batch of rows (B, T) under the model, evaluated `batch_size` rows at a time with
// no gradient on the model's device. The lm_head runs one row at a time, so memory stays at one
// row's (T, vocab) logits even for 150k-token vocabularies.
NllTotals token_nll(model::CausalLM& model, const at::Tensor& input_ids,
                    const at::Tensor& loss_mask, int64_t batch_size = 8);

// A scoring window: a slice of one document with its loss mask.
struct TokenWindow {
  std::vector<tokenizer::TokenId> tokens;
  std::vector<uint8_t> loss_mask;
  size_t document = 0;  // index in the dataset
};

// Cuts every document into windows of at most seq_len tokens, starting at 0, seq_len - 1,
// 2 (seq_len - 1), ...: consecutive windows share one token, so every target token after a
// document's first is scored exactly once (its context truncated at the window start). Documents
// of fewer than 2 tokens give no window. With max_tokens, windows stop (the last one cut short)
// once that many target tokens are covered, in file order.
std::vector<TokenWindow> score_windows(const data::TokenizedDataset& data, int64_t seq_len,
                                       std::optional<int64_t> max_tokens = std::nullopt);

// Scores windows in order, `batch_size` at a time, right-padded to the longest of each batch.
NllTotals token_nll(model::CausalLM& model, const std::vector<TokenWindow>& windows,
                    int64_t batch_size = 8);

}  // namespace rqat::train
