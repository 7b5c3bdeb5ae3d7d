// See sampler.h.
#include "generation/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "io/error.h"

namespace rqat::generation {

namespace {

// The candidates of one row in sampling order, sorted lazily: only as long a prefix as the filters
// and the draw look at (a peaked distribution over a 150k vocabulary never sorts it all).
class SortedPrefix {
 public:
  SortedPrefix(const float* logits, int64_t vocab, std::vector<int32_t>& scratch)
      : x_(logits), vocab_(vocab), idx_(scratch) {
    idx_.resize(static_cast<size_t>(vocab));
    std::iota(idx_.begin(), idx_.end(), 0);
  }
  int64_t size() const { return vocab_; }
  int32_t at(int64_t j) {
    if (j >= sorted_) grow(j + 1);
    return idx_[static_cast<size_t>(j)];
  }

 private:
  void grow(int64_t n) {
    const int64_t target = std::min(vocab_, std::max({n, 2 * sorted_, int64_t{64}}));
    const float* x = x_;
    std::partial_sort(idx_.begin() + sorted_, idx_.begin() + target, idx_.end(),
                      [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    sorted_ = target;
  }

  const float* x_;
  int64_t vocab_;
  std::vector<int32_t>& idx_;
  int64_t sorted_ = 0;
};

struct Kept {
  int64_t count = 0;  // a prefix of the sorted order
  double mass = 0;    // its probability mass at the temperature
};

// probs: softmax(logits / temperature) of the same row.
Kept filter_row(SortedPrefix& order, const float* logits, const float* probs,
                const SamplingParams& params) {
  const int64_t vocab = order.size();
  int64_t limit = vocab;
  double base_mass = 0;
  if (params.top_k > 0 && params.top_k < vocab) {
    const float threshold = logits[order.at(params.top_k - 1)];
    limit = params.top_k;
    while (limit < vocab && logits[order.at(limit)] >= threshold)
      ++limit;  // boundary ties are kept
    for (int64_t j = 0; j < limit; ++j) base_mass += probs[order.at(j)];
  } else {
    for (int64_t i = 0; i < vocab; ++i) base_mass += probs[i];
  }
  const bool use_top_p = params.top_p<1.0, use_min_p = params.min_p> 0.0;
  if (!use_top_p && !use_min_p) return {limit, base_mass};

  const double mass_cut = params.top_p * base_mass;
  const double prob_cut = params.min_p * static_cast<double>(probs[order.at(0)]);
  double cum = 0;
  int64_t j = 0;
  for (; j < limit; ++j) {
    const int32_t id = order.at(j);
    if (j > 0) {
      if (use_top_p && cum >= mass_cut) break;
      if (use_min_p && static_cast<double>(probs[id]) < prob_cut) break;
    }
    cum += probs[id];
  }
  return {j, cum};
}

int32_t draw_row(SortedPrefix& order, const float* probs, const Kept& kept, double u) {
  const double target = u * kept.mass;
  double cum = 0;
  for (int64_t j = 0; j < kept.count; ++j) {
    const int32_t id = order.at(j);
    cum += probs[id];
    if (cum > target) return id;
  }
  return order.at(kept.count - 1);  // u * mass rounded up to the total
}

// softmax(logits / temperature) per row; rows with temperature <= 0 use 1 (their probs are unused).
at::Tensor tempered_probs(const at::Tensor& logits,
                          const std::vector<const SamplingParams*>& params) {
  std::vector<float> inv_temp(params.size());
  for (size_t b = 0; b < params.size(); ++b) {
    inv_temp[b] = params[b]->greedy() ? 1.0f : static_cast<float>(1.0 / params[b]->temperature);
  }
  auto scale =
      at::from_blob(inv_temp.data(), {static_cast<int64_t>(inv_temp.size()), 1}, at::kFloat);
  return at::softmax(logits * scale, 1).contiguous();
}

at::Tensor cpu_float_rows(const at::Tensor& logits) {
  if (logits.dim() != 2)
    fail("sampling expects logits of shape (batch, vocab), got {} dims", logits.dim());
  return logits.detach().to(at::kCPU, at::kFloat).contiguous();
}

}  // namespace

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t sample_seed(uint64_t request_seed, uint64_t sample_index) {
  return splitmix64(splitmix64(request_seed) + sample_index);
}

at::Generator make_sample_generator(uint64_t request_seed, uint64_t sample_index) {
  return at::make_generator<at::CPUGeneratorImpl>(sample_seed(request_seed, sample_index));
}

double next_uniform(at::Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  const uint64_t bits = gen.get<at::CPUGeneratorImpl>()->random64();
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void validate_sampling(const SamplingParams& p) {
  if (std::isnan(p.temperature) || std::isinf(p.temperature))
    fail("temperature must be finite, got {}", p.temperature);
  if (p.top_k < 0) fail("top_k must be >= 0 (0 = off), got {}", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0))
    fail("top_p must be in (0, 1] (1 = off), got {}", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0))
    fail("min_p must be in [0, 1] (0 = off), got {}", p.min_p);
  if (p.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got {}", p.max_new_tokens);
}

std::vector<int32_t> kept_tokens(const at::Tensor& logits, const SamplingParams& params) {
  validate_sampling(params);
  auto rows = cpu_float_rows(logits.reshape({1, -1}));
  if (params.greedy()) return {static_cast<int32_t>(rows.argmax(1).item<int64_t>())};
  auto probs = tempered_probs(rows, {&params});
  std::vector<int32_t> scratch;
  SortedPrefix order(rows.const_data_ptr<float>(), rows.size(1), scratch);
  const Kept kept =
      filter_row(order, rows.const_data_ptr<float>(), probs.const_data_ptr<float>(), params);
  std::vector<int32_t> out;
  for (int64_t j = 0; j < kept.count; ++j) out.push_back(order.at(j));
  return out;
}

std::vector<TokenChoice> sample_rows(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<at::Generator*>& gens) {
  auto rows = cpu_float_rows(logits);
  const int64_t batch = rows.size(0), vocab = rows.size(1);
  if (static_cast<int64_t>(params.size()) != batch || static_cast<int64_t>(gens.size()) != batch) {
    fail("sample_rows: {} rows but {} params and {} generators", batch, params.size(), gens.size());
  }
  std::vector<TokenChoice> out(static_cast<size_t>(batch));
  if (batch == 0) return out;
  auto lse = at::logsumexp(rows, 1).contiguous();
  auto argmax = rows.argmax(1).contiguous();
  const float* lse_data = lse.const_data_ptr<float>();
  const int64_t* argmax_data = argmax.const_data_ptr<int64_t>();
  bool any_sampled = false;
  for (const auto* p : params) any_sampled = any_sampled || !p->greedy();
  at::Tensor probs = any_sampled ? tempered_probs(rows, params) : at::Tensor();

  std::vector<int32_t> scratch;
  const float* base = rows.const_data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    if (!std::isfinite(lse_data[b]))
      fail("sampling: logits of row {} are not finite (NaN or inf)", b);
    const float* x = base + b * vocab;
    const SamplingParams& p = *params[static_cast<size_t>(b)];
    int32_t token;
    if (p.greedy()) {
      token = static_cast<int32_t>(argmax_data[b]);
    } else {
      at::Generator* gen = gens[static_cast<size_t>(b)];
      if (gen == nullptr) fail("sampling: row {} samples but has no generator", b);
      const float* pr = probs.const_data_ptr<float>() + b * vocab;
      SortedPrefix order(x, vocab, scratch);
      const Kept kept = filter_row(order, x, pr, p);
      token = draw_row(order, pr, kept, next_uniform(*gen));
    }
    const float logprob = x[token] - lse_data[b];
    float tempered = logprob;
    if (!p.greedy() && p.temperature != 1.0) {
      // log-sum-exp of x / T in double, shifted by the row's maximum for stability.
      const double inv_t = 1.0 / p.temperature;
      const double top = static_cast<double>(x[argmax_data[b]]) * inv_t;
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(x[v]) * inv_t - top);
      tempered = static_cast<float>(static_cast<double>(x[token]) * inv_t - top - std::log(sum));
    }
    out[static_cast<size_t>(b)] = TokenChoice{token, logprob, tempered};
  }
  return out;
}

TokenChoice sample_token(const at::Tensor& logits, const SamplingParams& params,
                         at::Generator* gen) {
  return sample_rows(logits.reshape({1, -1}), {&params}, {gen}).front();
}

}  // namespace rqat::generation
