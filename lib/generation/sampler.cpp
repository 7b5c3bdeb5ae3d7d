// See sampler.h.
#include "generation/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "io/error.h"
#include "ops/host_copy.h"

namespace rqat::generation {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t sample_seed(uint64_t request_seed, uint64_t sample_index) {
  return splitmix64(splitmix64(request_seed) + sample_index);
}

double sample_uniform(uint64_t request_seed, uint64_t sample_index, uint64_t position) {
  const uint64_t bits = splitmix64(sample_seed(request_seed, sample_index) ^ splitmix64(position));
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

ops::SamplingTensors sampling_tensors(const std::vector<const SamplingParams*>& params,
                                      const std::vector<double>& uniforms, c10::Device device) {
  const int64_t batch = static_cast<int64_t>(params.size());
  if (uniforms.size() != params.size())
    fail("sampling: {} rows of settings but {} uniforms", params.size(), uniforms.size());
  // Rows of one float64 buffer: 1/T, greedy, top_k, top_p, min_p, u (top_k < 2^53 is exact).
  auto host = at::empty({6, batch}, at::kDouble);
  double* h = host.data_ptr<double>();
  bool all_greedy = true;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& p = *params[static_cast<size_t>(b)];
    h[b] = p.greedy() ? 1.0 : 1.0 / p.temperature;
    h[batch + b] = p.greedy() ? 1.0 : 0.0;
    h[2 * batch + b] = static_cast<double>(p.top_k);
    h[3 * batch + b] = p.top_p;
    h[4 * batch + b] = p.min_p;
    h[5 * batch + b] = uniforms[static_cast<size_t>(b)];
    all_greedy = all_greedy && p.greedy();
  }
  auto dev = ops::copy_to_device(host, device);
  ops::SamplingTensors s;
  s.inv_temperature = dev[0].to(at::kFloat);
  s.greedy = dev[1].to(at::kBool);
  s.top_k = dev[2].to(at::kLong);
  s.top_p = dev[3];
  s.min_p = dev[4];
  s.uniform = dev[5];
  s.all_greedy = all_greedy;
  return s;
}

std::vector<int32_t> kept_tokens(const at::Tensor& logits, const SamplingParams& params) {
  validate_sampling(params);
  auto row = logits.detach().reshape({1, -1}).to(at::kFloat);
  auto kept = ops::kept_tokens_ref(row, sampling_tensors({&params}, {0.0}, row.device()))[0].cpu();
  auto x = row[0].cpu();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < x.size(0); ++i)
    if (kept[i].item<bool>()) out.push_back(static_cast<int32_t>(i));
  const float* v = x.const_data_ptr<float>();
  std::stable_sort(out.begin(), out.end(), [v](int32_t a, int32_t b) { return v[a] > v[b]; });
  return out;
}

std::vector<TokenChoice> sample_rows(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<double>& uniforms, int64_t* host_bytes) {
  if (logits.dim() != 2)
    fail("sampling expects logits of shape (batch, vocab), got {} dims", logits.dim());
  if (static_cast<int64_t>(params.size()) != logits.size(0))
    fail("sample_rows: {} rows but {} params", logits.size(0), params.size());
  if (logits.size(0) == 0) return {};
  return fetch_choices(
      ops::sample_tokens(logits, sampling_tensors(params, uniforms, logits.device())), host_bytes);
}

std::vector<TokenChoice> fetch_choices(const ops::SampledTokens& chosen, int64_t* host_bytes) {
  const int64_t batch = chosen.token.size(0);
  std::vector<TokenChoice> out(static_cast<size_t>(batch));
  // Ids as int32 and the two log-probabilities in one copy (the ids travel as the bits of
  // float32 lanes).
  auto id_bits = at::empty({batch}, chosen.logprob.options());
  id_bits.view(at::kInt).copy_(chosen.token);
  auto packed = ops::copy_to_host(at::stack({id_bits, chosen.logprob, chosen.tempered_logprob}));
  if (host_bytes != nullptr) *host_bytes += packed.numel() * 4;
  const auto id_row = packed[0].view(at::kInt);
  const int32_t* ids = id_row.const_data_ptr<int32_t>();
  const float* logprob = packed[1].const_data_ptr<float>();
  const float* tempered = packed[2].const_data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    if (!std::isfinite(logprob[b]))
      fail("sampling: logits of row {} are not finite (NaN or inf)", b);
    out[static_cast<size_t>(b)] = TokenChoice{ids[b], logprob[b], tempered[b]};
  }
  return out;
}

TokenChoice sample_token(const at::Tensor& logits, const SamplingParams& params, double uniform) {
  return sample_rows(logits.reshape({1, -1}), {&params}, {uniform}).front();
}

}  // namespace rqat::generation
