// See token_sampling.h. The reference sorts each row (stable, so ties stay in id order) and works
// on the sorted prefix with cumulative sums; the CPU kernel finds the same boundaries without a
// sort: top-k by nth_element, top-p by a histogram of the survivors' mass over the leading bits of
// the logit (an order-preserving integer key) and a sort of the one bucket that holds the
// boundary, min-p by a threshold, and the draw by one pass in id order.
#include "ops/token_sampling.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "io/error.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"

namespace rqat::ops {

namespace {

void check_settings(const at::Tensor& logits, const SamplingTensors& s) {
  if (logits.dim() != 2)
    fail("sampling expects logits of shape (batch, vocab), got {} dims", logits.dim());
  const int64_t batch = logits.size(0);
  for (const at::Tensor* t :
       {&s.inv_temperature, &s.greedy, &s.top_k, &s.top_p, &s.min_p, &s.uniform}) {
    if (!t->defined() || t->dim() != 1 || t->size(0) != batch || t->device() != logits.device())
      fail("sampling: every per-row setting must be a ({}) tensor on {}", batch,
           logits.device().str());
  }
}

// Exclusive prefix sums along dim 1 without the rounding of cumsum - x.
at::Tensor exclusive_cumsum(const at::Tensor& x) {
  return at::cat({at::zeros_like(x.narrow(1, 0, 1)), x.cumsum(1).narrow(1, 0, x.size(1) - 1)}, 1);
}

// Order-preserving map of a float to an unsigned key (larger float, larger key).
inline uint32_t order_key(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// 14 leading bits of the key: a bucket holds logits within 1/32 of an octave, a few hundred tokens
// of a 150k vocabulary even for a flat distribution.
constexpr int kBucketShift = 18;
constexpr size_t kBuckets = size_t{1} << (32 - kBucketShift);

struct RowScratch {
  std::vector<float> values;
  std::vector<double> bucket_mass;
  std::vector<int32_t> bucket_ids;
};

// The kept set of one row is {x >= topk_cut} ∩ {(x, -id) >= (p_value, -p_id)} ∩ {p >= min_cut}.
struct RowFilter {
  float topk_cut = -std::numeric_limits<float>::infinity();
  float p_value = -std::numeric_limits<float>::infinity();  // logit of the last top-p token
  int64_t p_id = std::numeric_limits<int64_t>::max();       // its id (ties after it are cut)
  double min_cut = 0;
  bool keeps(float x, int64_t id, float p) const {
    return x >= topk_cut && (x > p_value || (x == p_value && id <= p_id)) &&
           static_cast<double>(p) >= min_cut;
  }
};

int64_t choose_in_row(const float* x, const float* p, int64_t vocab, int64_t top_k, double top_p,
                      double min_p, double u, int64_t argmax, RowScratch& scratch) {
  RowFilter filter;
  if (top_k > 0 && top_k < vocab) {
    scratch.values.assign(x, x + vocab);
    std::nth_element(scratch.values.begin(), scratch.values.begin() + (top_k - 1),
                     scratch.values.end(), std::greater<>());
    filter.topk_cut = scratch.values[static_cast<size_t>(top_k - 1)];
  }
  if (top_p < 1.0) {
    // Mass of the top-k survivors per bucket, then the bucket where the prefix mass reaches cut.
    scratch.bucket_mass.assign(kBuckets, 0.0);
    double base = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (x[i] < filter.topk_cut) continue;
      scratch.bucket_mass[order_key(x[i]) >> kBucketShift] += p[i];
      base += p[i];
    }
    const double cut = top_p * base;
    double before = 0;
    int64_t bucket = static_cast<int64_t>(kBuckets) - 1;
    for (; bucket >= 0; --bucket) {
      const double m = scratch.bucket_mass[static_cast<size_t>(bucket)];
      if (before + m >= cut) break;
      before += m;
    }
    if (bucket >= 0) {
      auto& ids = scratch.bucket_ids;
      ids.clear();
      for (int64_t i = 0; i < vocab; ++i) {
        if (x[i] >= filter.topk_cut && (order_key(x[i]) >> kBucketShift) == bucket)
          ids.push_back(static_cast<int32_t>(i));
      }
      std::sort(ids.begin(), ids.end(),
                [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
      // A token is kept while the mass before it is < cut (the row's first token always is).
      size_t last = ids.size() - 1;
      for (size_t j = 0; j < ids.size(); ++j) {
        if (before >= cut) {  // never at j = 0: the bucket search leaves before < cut
          last = j - 1;
          break;
        }
        before += p[ids[j]];
      }
      filter.p_value = x[ids[last]];
      filter.p_id = ids[last];
    }
  }
  if (min_p > 0) filter.min_cut = min_p * static_cast<double>(p[argmax]);

  double mass = 0;
  int64_t last_kept = argmax;
  for (int64_t i = 0; i < vocab; ++i) {
    if (filter.keeps(x[i], i, p[i])) {
      mass += p[i];
      last_kept = i;
    }
  }
  const double target = u * mass;
  double cum = 0;
  for (int64_t i = 0; i < last_kept; ++i) {
    if (!filter.keeps(x[i], i, p[i])) continue;
    cum += p[i];
    if (cum > target) return i;
  }
  return last_kept;  // u * mass rounded up to the total
}

// Every row greedy: the argmax and its log-probability, nothing else.
SampledTokens greedy_tokens(const at::Tensor& logits) {
  auto x = logits.to(at::kFloat);
  auto token = x.argmax(1);
  auto logprob = x.gather(1, token.view({-1, 1})).view({-1}) - at::logsumexp(x, 1);
  return {token, logprob, logprob};
}

}  // namespace

SampledTokens sample_tokens_cpu_kernel(const at::Tensor& logits, const SamplingTensors& s) {
  check_settings(logits, s);
  if (!logits.is_cpu())
    fail("sample_tokens_cpu_kernel: the logits are on {}", logits.device().str());
  RQAT_MARK_KERNEL("rqat::sample_tokens_cpu");
  auto x = logits.detach().to(at::kFloat).contiguous();
  const int64_t batch = x.size(0), vocab = x.size(1);
  auto xt = x * s.inv_temperature.view({batch, 1});
  auto probs = at::softmax(xt, 1).contiguous();
  auto lse = at::logsumexp(x, 1), lse_t = at::logsumexp(xt, 1);
  auto argmax = x.argmax(1).contiguous();
  auto token = argmax.clone();
  auto greedy = s.greedy.contiguous();
  auto top_k = s.top_k.contiguous();
  auto top_p = s.top_p.contiguous(), min_p = s.min_p.contiguous(), u = s.uniform.contiguous();
  const float* xd = x.const_data_ptr<float>();
  const float* pd = probs.const_data_ptr<float>();
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    RowScratch scratch;
    for (int64_t b = begin; b < end; ++b) {
      if (greedy.const_data_ptr<bool>()[b]) continue;
      token.data_ptr<int64_t>()[b] = choose_in_row(
          xd + b * vocab, pd + b * vocab, vocab, top_k.const_data_ptr<int64_t>()[b],
          top_p.const_data_ptr<double>()[b], min_p.const_data_ptr<double>()[b],
          u.const_data_ptr<double>()[b], argmax.const_data_ptr<int64_t>()[b], scratch);
    }
  });
  auto index = token.view({batch, 1});
  auto logprob = x.gather(1, index).view({batch}) - lse;
  auto tempered = at::where(greedy, logprob, xt.gather(1, index).view({batch}) - lse_t);
  // Test hook (ops/kernel_choice.h): every row's token moved to the next id.
  if (kernel_fault(Kernel::kTokenSampling)) token = (token + 1).remainder_(vocab);
  return {token, logprob, tempered};
}

at::Tensor kept_tokens_ref(const at::Tensor& logits, const SamplingTensors& s) {
  check_settings(logits, s);
  auto x = logits.to(at::kFloat);
  const int64_t batch = x.size(0), vocab = x.size(1);
  auto p = at::softmax(x * s.inv_temperature.view({batch, 1}), 1).to(at::kDouble);
  auto [values, order] = x.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true);
  auto ps = p.gather(1, order);
  auto k = s.top_k.view({batch, 1});
  auto kth = values.gather(1, (k.clamp(1, vocab) - 1));
  auto keep = (values >= kth).logical_or_(k <= 0);
  auto survivors = ps * keep;
  auto base = survivors.sum(1, /*keepdim=*/true);
  auto first = (at::arange(vocab, order.options()) == 0).view({1, vocab});
  auto top_p = s.top_p.view({batch, 1});
  keep.logical_and_(
      (exclusive_cumsum(survivors) < top_p * base).logical_or_(first).logical_or_(top_p >= 1.0));
  keep.logical_and_(ps >= s.min_p.view({batch, 1}) * ps.narrow(1, 0, 1));
  auto kept = at::zeros_like(keep).scatter_(1, order, keep);
  auto one_hot = at::zeros_like(kept).scatter_(1, x.argmax(1, /*keepdim=*/true), true);
  return at::where(s.greedy.view({batch, 1}), one_hot, kept);
}

SampledTokens sample_tokens_ref(const at::Tensor& logits, const SamplingTensors& s) {
  if (s.all_greedy) {
    check_settings(logits, s);
    return greedy_tokens(logits);
  }
  auto kept = kept_tokens_ref(logits, s);
  auto x = logits.to(at::kFloat);
  const int64_t batch = x.size(0), vocab = x.size(1);
  auto xt = x * s.inv_temperature.view({batch, 1});
  auto p = at::softmax(xt, 1).to(at::kDouble);
  auto cum = (p * kept).cumsum(1);
  auto target = s.uniform * cum.select(1, vocab - 1);
  auto below = (cum <= target.view({batch, 1})).sum(1);
  auto ids = at::arange(vocab, s.top_k.options()).view({1, vocab});
  auto last_kept = at::where(kept, ids, at::zeros_like(ids)).amax(1);
  auto token = at::where(s.greedy, x.argmax(1), at::minimum(below, last_kept));
  auto index = token.view({batch, 1});
  auto logprob = x.gather(1, index).view({batch}) - at::logsumexp(x, 1);
  auto tempered =
      at::where(s.greedy, logprob, xt.gather(1, index).view({batch}) - at::logsumexp(xt, 1));
  return {token, logprob, tempered};
}

SampledTokens sample_tokens(const at::Tensor& logits, const SamplingTensors& s) {
  check_settings(logits, s);
  // One conversion here for every caller: bf16 rows on the CPU take the kernel too.
  const auto x = logits.detach().to(at::kFloat);
  if (s.all_greedy) return greedy_tokens(x);
  if (x.device().is_cpu() && use_custom_kernel(Kernel::kTokenSampling, x.device()))
    return sample_tokens_cpu_kernel(x, s);
  return sample_tokens_ref(x, s);
}

}  // namespace rqat::ops
