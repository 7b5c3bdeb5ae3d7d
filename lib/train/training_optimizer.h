// AdamW over a model's trainable parameters, with the state a checkpoint needs.
//
// Weight decay applies only to weight matrices ("*.weight" with 2 or more dimensions): norms and
// biases are 1-D and quantization parameters (scales, zeros, clipping logits) are named otherwise,
// so none of them is pulled towards zero (the usual exclusion of transformers' Trainer, extended
// to the quantizer). Frozen parameters (requires_grad false, e.g. frozen scales registered as
// parameters) are not handed to the optimizer at all.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace rqat::train {

struct NamedParameter {
  std::string name;
  at::Tensor tensor;
  bool decay = false;
};

// requires_grad parameters of `module` in registration order, with their decay flag.
std::vector<NamedParameter> trainable_parameters(torch::nn::Module& module);

struct AdamWSettings {
  double lr = 1e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // on weight matrices only (see above)
  void validate() const;      // errors name --adam-beta1, --adam-beta2, --adam-eps, --weight-decay
};

class TrainingOptimizer {
 public:
  TrainingOptimizer(std::vector<NamedParameter> parameters, const AdamWSettings& settings);

  void set_lr(double lr);
  void zero_grad();
  void step();
  // Scales gradients so their global L2 norm is at most max_norm (<= 0: no clipping); returns the
  // norm before clipping (NaN/Inf when a gradient is not finite, which the caller checks).
  double clip_grad_norm(double max_norm);

  const std::vector<NamedParameter>& parameters() const { return parameters_; }
  std::vector<at::Tensor> tensors() const;
  int64_t parameter_count() const;

  // The optimizer state as named tensors ("adam.exp_avg.NAME", "adam.exp_avg_sq.NAME",
  // "adam.step.NAME"), and its inverse; a loaded state continues bit-identically. load_state
  // errors name `where` and the parameter when something is missing or has another shape.
  io::NamedTensors state_tensors() const;
  void load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                  const std::string& where);

 private:
  std::vector<NamedParameter> parameters_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace rqat::train
