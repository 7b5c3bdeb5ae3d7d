// LoRA (Hu et al. 2021) over a frozen base layer, for QLoRA-style training (issue 7): the base
// (full-precision, fake-quantized or a packed GPTQ layer) stays as it is and only a low-rank update
// trains,
//   y = base(x) + (alpha / rank) * dropout(x) A^T B^T,
// with A (rank, in) and B (out, rank) float32 in PEFT's layout and PEFT's initialization: A
// kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), and B zero, so a fresh adapter
// leaves the layer's output unchanged (bit for bit) while its gradients are non-zero.
//
// Determinism: A's initialization and every dropout mask come from generators seeded from
// (seed, layer name), not from the global generator, so a run is reproducible from its seed
// whatever else draws random numbers. Each training-mode forward uses the next mask of the layer's
// sequence ("draw" n gets a generator seeded from (seed, name, n)). Activation checkpointing runs a
// block twice, once without autograd and again in the backward pass: a forward that runs inside a
// backward pass reuses the draw of the latest forward that ran without autograd, so the recomputed
// block sees the masks of the original one (as torch.utils.checkpoint's preserve_rng_state does).
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/linear.h"

namespace rqat::model {

struct LoraOptions {
  int64_t rank = 16;
  double alpha = 32;
  double dropout = 0.0;
  uint64_t seed = 0;
  // rank >= 1, alpha finite and > 0, dropout in [0, 1); errors name --lora-rank, --lora-alpha,
  // --lora-dropout.
  void validate() const;
};

class LoraLinear : public Linear {
 public:
  // Registers `base` as submodule "base_layer" and sets requires_grad(false) on all its parameters
  // (scales of an LSQ FakeQuantLinear included), and the parameters "lora_A" and "lora_B" on the
  // base's device. `name` is the layer's full name ("model.layers.0.mlp.up_proj"): it seeds the
  // generators and names the layer in errors.
  LoraLinear(std::shared_ptr<Linear> base, const LoraOptions& options, const std::string& name);

  // x (..., in) -> (..., out) in the base's output dtype; the adapter computes in float32.
  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features() const override { return base_->in_features(); }
  int64_t out_features() const override { return base_->out_features(); }
  // The base's effective weight + scale * B A (float32, no autograd history).
  at::Tensor effective_weight() const override;
  std::optional<at::Tensor> bias() const override { return base_->bias(); }

  const std::shared_ptr<Linear>& base() const { return base_; }
  const at::Tensor& lora_A() const { return lora_A_; }  // (rank, in) float32
  const at::Tensor& lora_B() const { return lora_B_; }  // (out, rank) float32
  double scale() const { return scale_; }               // alpha / rank
  const LoraOptions& options() const { return options_; }
  const std::string& layer_name() const { return name_; }

 private:
  at::Tensor dropout(const at::Tensor& h);
  uint64_t next_draw();

  std::shared_ptr<Linear> base_;
  LoraOptions options_;
  std::string name_;
  double scale_;
  at::Tensor lora_A_, lora_B_;
  // Dropout: draws made so far, the draws of forwards without autograd that a checkpoint recompute
  // may ask for again (newest last, bounded), and the generator of the current device.
  uint64_t draws_ = 0;
  std::vector<uint64_t> replay_;
  std::optional<at::Generator> generator_;
};

}  // namespace rqat::model
