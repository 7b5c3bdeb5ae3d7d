// Rotary position embedding (RoPE) with the llama3 frequency scaling, in the rotate-half layout of
// Hugging Face checkpoints (the two halves of each head are the real and imaginary parts).
#pragma once

#include <ATen/Tensor.h>

#include <utility>

#include "model/model_config.h"

namespace rqat::model {

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);

  // positions: (B, T) int64 -> cos, signed_sin: (B, T, head_dim) in `dtype` on positions'
  // device; signed_sin is sin with its first half negated (the rotate-half sign, for
  // ops::rotary).
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& positions,
                                            at::ScalarType dtype) const;
  const at::Tensor& inv_freq() const { return inv_freq_; }  // (head_dim / 2) float32, on the CPU

  // The same values looked up in a table of positions [0, n) kept between calls (decode steps need
  // one row each; recomputing costs more ATen calls than the step's arithmetic). Bit-identical to
  // cos_sin, which computes every entry the same way.
  // max_position: the largest entry of positions, known to the caller without a device sync.
  std::pair<at::Tensor, at::Tensor> cos_sin_lookup(const at::Tensor& positions,
                                                   int64_t max_position, at::ScalarType dtype);

 private:
  at::Tensor inv_freq_;
  // inv_freq_ on the device of the last positions: copied once, not in every forward.
  mutable at::Tensor inv_freq_on_device_;
  at::Tensor table_cos_, table_sin_;  // (n, head_dim), grown on demand
};

}  // namespace rqat::model
