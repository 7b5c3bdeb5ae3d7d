// See token_nll.h.
#include "train/token_nll.h"

#include <torch/torch.h>

#include <algorithm>

#include "io/error.h"

namespace rqat::train {

namespace {

void check_rows(const at::Tensor& input_ids, const at::Tensor& loss_mask) {
  if (input_ids.dim() != 2)
    fail("token NLL: input_ids must be (B, T), got {} dims", input_ids.dim());
  if (!loss_mask.defined() || loss_mask.sizes() != input_ids.sizes())
    fail("token NLL: loss_mask must have the shape of input_ids (B, T)");
}

}  // namespace

MaskedNllSum masked_next_token_nll(const at::Tensor& logits, const at::Tensor& input_ids,
                                   const at::Tensor& loss_mask) {
  check_rows(input_ids, loss_mask);
  const int64_t t = input_ids.size(1);
  if (logits.dim() != 3 || logits.size(0) != input_ids.size(0) || logits.size(1) != t)
    fail("token NLL: logits must be (B, T, V) for input_ids (B, T)");
  MaskedNllSum out;
  if (t < 2) {
    out.sum = torch::zeros({}, logits.options().dtype(torch::kFloat));
    return out;
  }
  // Position t-1 predicts token t.
  const at::Tensor log_probs = logits.slice(1, 0, t - 1).to(torch::kFloat).log_softmax(-1);
  const at::Tensor targets = input_ids.slice(1, 1).to(logits.device(), torch::kLong);
  const at::Tensor scored = loss_mask.slice(1, 1).to(logits.device()).to(torch::kBool);
  const at::Tensor nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  // where(), not a product: an unscored -inf (e.g. a padding id the model never predicts) would
  // otherwise turn the sum into NaN.
  out.sum = torch::where(scored, nll, torch::zeros_like(nll)).sum();
  out.tokens = scored.sum().item<int64_t>();
  return out;
}

NllTotals token_nll(model::CausalLM& model, const at::Tensor& input_ids,
                    const at::Tensor& loss_mask, int64_t batch_size) {
  check_rows(input_ids, loss_mask);
  if (batch_size < 1) fail("token NLL: batch size must be >= 1, got {}", batch_size);
  const int64_t vocab = model.config().vocab_size;
  const int64_t max_id = input_ids.numel() ? input_ids.max().item<int64_t>() : 0;
  const int64_t min_id = input_ids.numel() ? input_ids.min().item<int64_t>() : 0;
  if (min_id < 0 || max_id >= vocab)
    fail("token NLL: token id {} is outside the model's vocabulary of {}",
         min_id < 0 ? min_id : max_id, vocab);
  c10::InferenceMode no_grad;
  const c10::Device device = model.options().device();
  NllTotals totals;
  const int64_t rows = input_ids.size(0), t = input_ids.size(1);
  if (t < 2) return totals;
  for (int64_t begin = 0; begin < rows; begin += batch_size) {
    const int64_t end = std::min(rows, begin + batch_size);
    const at::Tensor ids = input_ids.slice(0, begin, end).to(device, torch::kLong);
    const at::Tensor scored = loss_mask.slice(0, begin, end).slice(1, 1).to(torch::kBool).cpu();
    const at::Tensor hidden = model.hidden_states(ids);  // (b, T, H)
    for (int64_t r = 0; r < end - begin; ++r) {
      // Only the scored positions go through the lm_head: (scored, vocab) logits per row.
      const at::Tensor positions = scored[r].nonzero().squeeze(-1).to(device);  // t-1 of target t
      if (positions.numel() == 0) continue;
      const at::Tensor logits = model.logits(hidden[r].index_select(0, positions));
      const at::Tensor targets = ids[r].index_select(0, positions + 1);
      const at::Tensor log_probs = logits.to(torch::kFloat).log_softmax(-1);
      const at::Tensor nll = -log_probs.gather(-1, targets.unsqueeze(-1));
      totals.sum_nll += nll.to(torch::kDouble).sum().item<double>();
      totals.tokens += positions.numel();
    }
  }
  return totals;
}

std::vector<TokenWindow> score_windows(const data::TokenizedDataset& data, int64_t seq_len,
                                       std::optional<int64_t> max_tokens) {
  if (seq_len < 2) fail("token NLL: the window length must be >= 2 tokens, got {}", seq_len);
  if (max_tokens && *max_tokens < 1)
    fail("token NLL: max tokens must be >= 1, got {}", *max_tokens);
  std::vector<TokenWindow> windows;
  int64_t covered = 0;
  for (const auto& doc : data.documents) {
    const auto n = static_cast<int64_t>(doc.tokens.size());
    for (int64_t start = 0; start + 1 < n; start += seq_len - 1) {
      int64_t end = std::min(n, start + seq_len);
      int64_t targets = 0;
      for (int64_t i = start + 1; i < end; ++i) {
        if (max_tokens && covered + targets == *max_tokens) {
          end = i;  // cut short: the budget is spent
          break;
        }
        targets += doc.loss_mask[i];
      }
      TokenWindow w;
      w.document = doc.index;
      w.tokens.assign(doc.tokens.begin() + start, doc.tokens.begin() + end);
      w.loss_mask.assign(doc.loss_mask.begin() + start, doc.loss_mask.begin() + end);
      covered += targets;
      if (targets > 0) windows.push_back(std::move(w));
      if (max_tokens && covered >= *max_tokens) return windows;
    }
  }
  return windows;
}

NllTotals token_nll(model::CausalLM& model, const std::vector<TokenWindow>& windows,
                    int64_t batch_size) {
  if (batch_size < 1) fail("token NLL: batch size must be >= 1, got {}", batch_size);
  NllTotals totals;
  for (size_t begin = 0; begin < windows.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(windows.size(), begin + static_cast<size_t>(batch_size));
    size_t longest = 0;
    for (size_t i = begin; i < end; ++i) longest = std::max(longest, windows[i].tokens.size());
    at::Tensor ids = torch::zeros(
        {static_cast<int64_t>(end - begin), static_cast<int64_t>(longest)}, torch::kLong);
    at::Tensor mask = torch::zeros_like(ids, torch::kBool);
    auto ids_a = ids.accessor<int64_t, 2>();
    auto mask_a = mask.accessor<bool, 2>();
    for (size_t i = begin; i < end; ++i) {
      const auto& w = windows[i];
      for (size_t t = 0; t < w.tokens.size(); ++t) {
        ids_a[i - begin][t] = w.tokens[t];
        mask_a[i - begin][t] = w.loss_mask[t] != 0;
      }
    }
    totals += token_nll(model, ids, mask, batch_size);
  }
  return totals;
}

}  // namespace rqat::train
