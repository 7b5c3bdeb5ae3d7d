#include "rl/policy_logprobs.h"

#include <algorithm>

#include "io/error.h"

namespace rqat::rl {

PolicyBatch make_policy_batch(std::span<const PolicySequence> rows, int64_t pad_id,
                              c10::Device device) {
  if (rows.empty()) fail("policy batch: no rows");
  int64_t width = 0;
  for (const auto& r : rows) {
    if (r.prompt.empty()) fail("policy batch: a row has an empty prompt");
    width = std::max<int64_t>(width, static_cast<int64_t>(r.prompt.size() + r.completion.size()));
  }
  const auto b = static_cast<int64_t>(rows.size());
  auto ids = at::full({b, width}, pad_id, at::kLong);
  auto mask = at::zeros({b, width}, at::kLong);
  auto completion = at::zeros({b, width - 1}, at::kBool);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<int64_t, 2>();
  auto completion_a = completion.accessor<bool, 2>();
  PolicyBatch batch;
  for (int64_t i = 0; i < b; ++i) {
    const auto& r = rows[static_cast<size_t>(i)];
    const int64_t length = static_cast<int64_t>(r.prompt.size() + r.completion.size());
    int64_t col = width - length;
    for (int32_t t : r.prompt) {
      ids_a[i][col] = t;
      mask_a[i][col++] = 1;
    }
    for (int32_t t : r.completion) {
      ids_a[i][col] = t;
      mask_a[i][col] = 1;
      completion_a[i][col - 1] = true;  // predicted from column col - 1
      ++col;
    }
    batch.completion_tokens += static_cast<int64_t>(r.completion.size());
  }
  batch.input_ids = ids.to(device);
  batch.attention_mask = mask.to(device);
  batch.completion_mask = completion.to(device);
  return batch;
}

PolicyLogprobs policy_logprobs(model::CausalLM& model, const PolicyBatch& batch, double temperature,
                               bool with_entropy) {
  if (!(temperature > 0)) fail("policy log-probs: temperature must be > 0, got {}", temperature);
  const int64_t t = batch.input_ids.size(1);
  const at::Tensor logits = model.forward(batch.input_ids, batch.attention_mask);
  at::Tensor scaled = logits.slice(1, 0, t - 1).to(at::kFloat);
  if (temperature != 1.0) scaled = scaled / temperature;
  const at::Tensor log_probs = scaled.log_softmax(-1);
  const at::Tensor targets = batch.input_ids.slice(1, 1).unsqueeze(-1);
  PolicyLogprobs out;
  out.logp = log_probs.gather(-1, targets).squeeze(-1).masked_fill(~batch.completion_mask, 0.0);
  if (with_entropy) {
    at::NoGradGuard no_grad;
    const at::Tensor lp = log_probs.detach();
    out.entropy = (-(lp.exp() * lp).sum(-1)).masked_fill(~batch.completion_mask, 0.0);
  }
  return out;
}

at::Tensor align_completion_values(const PolicyBatch& batch,
                                   const std::vector<std::span<const float>>& values) {
  const int64_t b = batch.input_ids.size(0), width = batch.input_ids.size(1);
  if (static_cast<int64_t>(values.size()) != b)
    fail("align_completion_values: {} rows of values for {} rows", values.size(), b);
  auto out = at::zeros({b, width - 1}, at::kFloat);
  auto a = out.accessor<float, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const auto& v = values[static_cast<size_t>(i)];
    const int64_t start = width - 1 - static_cast<int64_t>(v.size());
    for (size_t j = 0; j < v.size(); ++j) a[i][start + static_cast<int64_t>(j)] = v[j];
  }
  return out.to(batch.input_ids.device());
}

}  // namespace rqat::rl
