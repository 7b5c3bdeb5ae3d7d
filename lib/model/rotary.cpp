// See rotary.h. Frequencies are computed in float32 exactly as the reference does, since a
// different rounding of inv_freq shows up as logit differences at long positions.
#include "model/rotary.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rqat::model {

namespace {

// Llama 3.1 scaling: wavelengths longer than original_context/low_freq_factor are divided by
// `factor`, shorter than original_context/high_freq_factor kept, and the band between blended.
at::Tensor scale_llama3(const at::Tensor& inv_freq, const Llama3RopeScaling& s) {
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  auto wavelen = 2 * std::numbers::pi / inv_freq;
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = at::logical_and(wavelen >= high_freq_wavelen, wavelen <= low_freq_wavelen);
  return at::where(medium, blended, scaled);
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  auto exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  inv_freq_ = 1.0 / at::pow(config.rope_theta, exponents);
  if (config.rope_llama3) inv_freq_ = scale_llama3(inv_freq_, *config.rope_llama3);
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(const at::Tensor& positions,
                                                           at::ScalarType dtype) const {
  if (!inv_freq_on_device_.defined() || inv_freq_on_device_.device() != positions.device())
    inv_freq_on_device_ = inv_freq_.to(positions.device());
  const auto& inv_freq = inv_freq_on_device_;
  auto freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // (B, T, D/2)
  // Both halves of a head share the angles: each computed once, the halves joined after (the same
  // values as cos/sin of the angles repeated). The rotate-half sign is folded into sin (see
  // ops/rotary.h); negation is exact.
  const auto cos_half = freqs.cos().to(dtype), sin_half = freqs.sin().to(dtype);
  return {at::cat({cos_half, cos_half}, -1), at::cat({-sin_half, sin_half}, -1)};
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin_lookup(const at::Tensor& positions,
                                                                  int64_t max_position,
                                                                  at::ScalarType dtype) {
  const int64_t needed = max_position + 1;
  if (!table_cos_.defined() || table_cos_.size(0) < needed || table_cos_.scalar_type() != dtype ||
      table_cos_.device() != positions.device()) {
    const int64_t size =
        std::max<int64_t>(needed, table_cos_.defined() ? 2 * table_cos_.size(0) : 256);
    auto all = at::arange(size, positions.options().dtype(at::kLong)).unsqueeze(0);
    std::tie(table_cos_, table_sin_) = cos_sin(all, dtype);
    table_cos_ = table_cos_.squeeze(0);
    table_sin_ = table_sin_.squeeze(0);
  }
  const auto flat = positions.reshape({-1});
  const auto shape = std::vector<int64_t>{positions.size(0), positions.size(1), -1};
  return {table_cos_.index_select(0, flat).view(shape),
          table_sin_.index_select(0, flat).view(shape)};
}

}  // namespace rqat::model
