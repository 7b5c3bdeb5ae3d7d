// AdamW over a model's trainable parameters, with the state a checkpoint needs.
//
// Weight decay applies only to weight matrices ("*.weight" with 2 or more dimensions): norms and
// biases are 1-D and quantization parameters (scales, zeros, clipping logits) are named otherwise,
// so none of them is pulled towards zero (the usual exclusion of transformers' Trainer, extended
// to the quantizer). Frozen parameters (requires_grad false, e.g. frozen scales registered as
// parameters) are not handed to the optimizer at all.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/layer_scope.h"
#include "train/shard_mode.h"

namespace rqat::train {

class Communicator;
class ShardedParameters;
struct StateBytes;

struct NamedParameter {
  std::string name;
  at::Tensor tensor;
  bool decay = false;
};

// requires_grad parameters of `module` in registration order, with their decay flag.
std::vector<NamedParameter> trainable_parameters(torch::nn::Module& module);
// Every parameter of `module` (a frozen model's, to shard it).
std::vector<NamedParameter> all_parameters(torch::nn::Module& module);

struct AdamWSettings {
  double lr = 1e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // on weight matrices only (see above)
  void validate() const;      // errors name --adam-beta1, --adam-beta2, --adam-eps, --weight-decay
};

// One AdamW update (torch.optim.AdamW's arithmetic) of tensors on one device and of one dtype, all
// at the same step count `step` (this update's, from 1), in one call of PyTorch's fused
// multi-tensor kernel (aten::_fused_adamw_: a kernel per chunk of tensors on a GPU, where the
// composite costs ~9 launches per tensor). Gradients are divided by `grad_scale` first (the
// inverse of a clipping factor). Decoupled weight decay `weight_decay` (0 for norms and biases).
void fused_adamw_update(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& exp_avgs,
                        const std::vector<at::Tensor>& exp_avg_sqs, int64_t step, double lr,
                        const AdamWSettings& settings, double weight_decay, double grad_scale);

// What gradients of global L2 norm `norm` are multiplied by to clip them to max_norm (as PyTorch's
// clip_grad_norm_: max_norm / (norm + 1e-6)); 1 when no clipping applies (max_norm <= 0, the norm
// within it, or not finite: the caller stops on that).
double clip_coefficient(double norm, double max_norm);

// How the training state is split over ranks (train/shard_mode.h, train/sharded_parameters.h).
struct ShardOptions {
  ShardMode mode = ShardMode::kNone;
  Communicator* comm = nullptr;                  // needed unless mode is kNone
  at::ScalarType compute_dtype = at::kFloat;     // the modules' copies; masters stay fp32
};

// The sharding of a training tool: bf16 compute copies when the tool computes in bf16 on CUDA.
ShardOptions shard_options(ShardMode mode, Communicator& comm, bool bf16_compute);

// With ShardMode::kNone, AdamW over the full parameters (the unsharded DDP of
// train/distributed.h), updated with fused_adamw_update per group of tensors. Otherwise
// ShardedParameters holds the masters and moments, and the methods marked "communicates" must be
// called on every rank.
class TrainingOptimizer {
 public:
  TrainingOptimizer(std::vector<NamedParameter> parameters, const AdamWSettings& settings,
                    ShardOptions shard = {});
  ~TrainingOptimizer();

  void set_lr(double lr);
  void zero_grad();
  // Communicates: gradients summed over ranks (all-reduce, or into the ranks' slices).
  void reduce_gradients(Communicator& comm);
  void step();
  // Scales gradients so their global L2 norm is at most max_norm (<= 0: no clipping); returns the
  // norm before clipping (NaN/Inf when a gradient is not finite, which the caller checks).
  // Unsharded, the scaling happens inside the next step() (the fused update divides the gradients,
  // no launch per tensor); sharded, the norm over every rank's slices (communicates).
  double clip_grad_norm(double max_norm);

  // --- sharding (each a no-op with ShardMode::kNone) ---
  ShardMode shard_mode() const { return shard_.mode; }
  // The scope to install on the trained model (CausalLM::set_layer_scope) in the gradients and
  // parameters modes, null otherwise.
  model::LayerScope* layer_scope();
  // Once the module holds its starting weights on every rank (fresh, broadcast or restored):
  // split them (no communication).
  void weights_ready();
  // Parameters mode: a frozen model (the teacher, the reference policy) is sharded too, its
  // scope installed by the caller; it follows gather_all/release_all. Returns its scope.
  model::LayerScope* shard_frozen(std::vector<NamedParameter> parameters);
  // Communicate: every model whole until release_all() (evaluation, rollouts).
  void gather_all(bool frozen_too = true);
  void release_all();
  // Communicates: the trained module's parameters become full fp32 tensors again (the final
  // artifact); later updates are not possible.
  void unshard();
  // Communicates: the fp32 master weights under parameter names (main rank; empty unsharded,
  // where the module's parameters are the masters).
  io::NamedTensors master_weights();
  // Tensor bytes of the state of `module` trained by this optimizer, on this rank.
  StateBytes state_bytes(torch::nn::Module& module) const;

  const std::vector<NamedParameter>& parameters() const { return parameters_; }
  std::vector<at::Tensor> tensors() const;
  int64_t parameter_count() const;

  // The optimizer state as named tensors ("adam.exp_avg.NAME", "adam.exp_avg_sq.NAME",
  // "adam.step.NAME"), and its inverse; a loaded state continues bit-identically. load_state
  // errors name `where` and the parameter when something is missing or has another shape.
  // Sharded: state_tensors communicates (the main rank receives the whole state), load_state
  // keeps this rank's slices of a state saved at any world size or shard mode.
  io::NamedTensors state_tensors();
  void load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                  const std::string& where);

 private:
  std::vector<NamedParameter> parameters_;
  AdamWSettings settings_;
  double lr_ = 0;
  ShardOptions shard_;
  // kNone: each parameter's moments (undefined before its first update) and update count.
  struct Moments {
    at::Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::vector<Moments> moments_;
  double grad_scale_ = 1;  // clip_grad_norm's 1 / factor, for the next step()
  std::unique_ptr<ShardedParameters> sharded_;         // otherwise
  std::vector<std::unique_ptr<ShardedParameters>> frozen_;
};

}  // namespace rqat::train
