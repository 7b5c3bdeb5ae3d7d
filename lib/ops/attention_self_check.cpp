// The first-use self-check of the fused CPU attention kernels (ops/kernel_self_checks.h): output
// and the gradients of q, k and v against attention_ref in float64 from the same float32 inputs,
// relative to the largest entry, within the kernels' test tolerances (kFusedAttentionTolerance,
// kFusedAttentionGradTolerance). Cases: one query and one key, grouped-query heads under a
// causal mask, left-padded rows, more keys than queries (a prefill after cached keys) with a
// head size that is not a multiple of the 16-lane vectors, and no mask.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/attention.h"
#include "ops/kernel_self_checks.h"

namespace rqat::ops {

namespace {

struct AttentionCase {
  const char* name;
  int64_t batch, heads, kv_heads, queries, keys, dim;
  bool masked, padded, backward;
};

// Causal with the last query seeing every key; padded: row b's first b keys are hidden, but a
// query always sees its own key.
at::Tensor case_mask(const AttentionCase& c) {
  if (!c.masked) return {};
  const auto query_key = at::arange(c.queries).view({-1, 1}) + (c.keys - c.queries);
  auto mask = (at::arange(c.keys).view({1, -1}) <= query_key)
                  .view({1, 1, c.queries, c.keys})
                  .repeat({c.batch, 1, 1, 1});
  if (c.padded) {
    for (int64_t b = 0; b < c.batch; ++b) mask[b].narrow(-1, 0, std::min(b, c.keys)).fill_(false);
    const auto own = at::arange(c.keys).view({1, -1}) == query_key;
    mask = mask.logical_or(own.view({1, 1, c.queries, c.keys}));
  }
  return mask;
}

double largest(const at::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

KernelCheck check_fused_attention(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const AttentionCase attention_cases[] = {
      {"one query, one key", 1, 2, 1, 1, 1, 8, false, false, true},
      {"GQA 4/2 heads, causal, 19 positions", 2, 4, 2, 19, 19, 16, true, false, true},
      {"left-padded rows, head 64", 3, 2, 2, 33, 33, 64, true, true, true},
      {"5 queries after 32 cached keys, head 24", 1, 6, 3, 5, 37, 24, true, false, false},
      {"no mask, 2 key blocks", 1, 2, 1, 7, 300, 32, false, false, false},
  };
  uint64_t seed = 0x5eed0002;
  for (const auto& c : attention_cases) {
    cases.run(c.name, [&] {
      // Scores of a few units: the softmax neither uniform nor one-hot.
      auto q = check_randn({c.batch, c.heads, c.queries, c.dim}, seed++, device) * 1.5;
      auto k = check_randn({c.batch, c.kv_heads, c.keys, c.dim}, seed++, device);
      auto v = check_randn({c.batch, c.kv_heads, c.keys, c.dim}, seed++, device);
      const auto mask = case_mask(c);  // a CPU check: the kernels are CPU kernels
      at::AutoGradMode grad_mode(c.backward);
      auto q64 = q.to(at::kDouble), k64 = k.to(at::kDouble), v64 = v.to(at::kDouble);
      if (c.backward)
        for (at::Tensor* t : {&q, &k, &v, &q64, &k64, &v64}) t->requires_grad_();
      auto out = fused_attention(q, k, v, mask);
      auto ref = attention_ref(q64, k64, v64, mask);
      cases.compare(out, ref, at::scalar_tensor(largest(ref)), kFusedAttentionTolerance);
      if (!c.backward) return;
      const auto dout = check_randn(out.sizes(), seed++, device);
      const auto grads = torch::autograd::grad({out}, {q, k, v}, {dout});
      const auto ref_grads = torch::autograd::grad({ref}, {q64, k64, v64}, {dout.to(at::kDouble)});
      for (size_t i = 0; i < 3; ++i)
        cases.compare(grads[i], ref_grads[i], at::scalar_tensor(largest(ref_grads[i])),
                      kFusedAttentionGradTolerance);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
