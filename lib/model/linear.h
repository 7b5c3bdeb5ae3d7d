// The one linear-layer abstraction of the decoder. Every projection (q/k/v/o, gate/up/down,
// lm_head) is a Linear, so the quantization issues swap in fake-quantized or packed variants by
// name without touching the model code. Parameter names ("weight", "bias") follow Hugging Face.
#pragma once

#include <torch/nn/module.h>

#include <optional>

namespace rqat::model {

class Linear : public torch::nn::Module {
 public:
  ~Linear() override = default;
  // x: (..., in_features) -> (..., out_features)
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  // The full-precision weight (out_features, in_features) this layer computes with; quantized
  // variants return their dequantized weight.
  virtual at::Tensor effective_weight() const = 0;
  virtual std::optional<at::Tensor> bias() const = 0;
};

// Plain y = x W^T + b.
// A layer that computes through another one (changing what goes in, or watching it): its shape,
// weight and bias are the inner layer's. Whether the inner layer is a registered submodule is the
// wrapper's choice.
class WrappingLinear : public Linear {
 public:
  explicit WrappingLinear(std::shared_ptr<Linear> inner) : inner_(std::move(inner)) {}
  int64_t in_features() const override { return inner_->in_features(); }
  int64_t out_features() const override { return inner_->out_features(); }
  at::Tensor effective_weight() const override { return inner_->effective_weight(); }
  std::optional<at::Tensor> bias() const override { return inner_->bias(); }

 protected:
  std::shared_ptr<Linear> inner_;
};

class DenseLinear : public Linear {
 public:
  // Parameters are allocated uninitialized: a checkpoint load or init_random fills them.
  DenseLinear(int64_t in_features, int64_t out_features, bool with_bias,
              const at::TensorOptions& options);

  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return weight_.size(1); }
  int64_t out_features() const override { return weight_.size(0); }
  at::Tensor effective_weight() const override { return weight_; }
  std::optional<at::Tensor> bias() const override;

  // Overwrites the parameters in place (same shape; converted to their dtype and device), e.g.
  // with dequantized weights after PTQ or with AWQ's rescaled ones.
  void assign_weight(const at::Tensor& weight);
  void assign_bias(const at::Tensor& bias);

 private:
  at::Tensor weight_;  // (out_features, in_features)
  at::Tensor bias_;    // (out_features) or undefined
};

}  // namespace rqat::model
