// The parameters of one model split over the data-parallel ranks (--shard, train/shard_mode.h),
// in the manner of ZeRO and FSDP's flat parameters, on the trainers' c10d process group.
//
// Layout. Parameters are grouped into buckets: one per decoder layer ("model.layers.N.*") and one
// "root" bucket for the rest (embeddings, final norm, lm_head). A bucket is flattened in
// registration order and padded to a multiple of the world size W; rank r owns the r-th of W equal
// slices. The layout depends only on names and shapes, so every rank computes the same one.
//
// A trained model (Kind::kTrained) keeps, per rank and bucket slice: the fp32 master weights, the
// fp32 gradient sum and both AdamW moments. The module's own parameters are compute copies (bf16
// or fp32), views into one flat buffer per bucket:
//   optimizer   full compute copies; full gradients until the update, then reduce-scattered;
//   gradients   full compute copies; each layer's gradients reduce-scattered (fp32) as soon as
//               its backward pass ends (LayerScope::exit), the root bucket's at the update;
//   parameters  the root bucket stays gathered; a layer's compute copy exists only between
//               enter() and exit() (gathered from the masters, freed after), forward and backward.
// After each AdamW step the updated masters are all-gathered into the compute copies (parameters
// mode: the root bucket only; layers are gathered when they next run).
//
// A frozen model (Kind::kFrozen: the qat-kd teacher, the GRPO reference policy) is only sharded in
// parameters mode: its layers keep their slice in the compute dtype and are gathered to run.
//
// Every method that communicates says so; all ranks must call it in the same order.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/layer_scope.h"
#include "train/distributed.h"
#include "train/shard_mode.h"
#include "train/state_bytes.h"
#include "train/training_optimizer.h"

namespace rqat::model {
class CausalLM;
}

namespace rqat::train {


// A model computing in `dtype` (bf16 compute copies): its frozen floating-point parameters are cast
// now, its trainable ones by ShardedParameters::shard_from_module (their masters stay fp32), and
// the model makes activations and caches in `dtype`.
void use_compute_dtype(model::CausalLM& model, at::ScalarType dtype);

class ShardedParameters final : public model::LayerScope {
 public:
  enum class Kind { kTrained, kFrozen };

  // `parameters`: the module's trainable parameters (kTrained) or all of them (kFrozen), as the
  // module holds them now (full, identical on every rank). Nothing is split until
  // shard_from_module(). `mode` is not kNone.
  ShardedParameters(std::vector<NamedParameter> parameters, Communicator& comm, ShardMode mode,
                    at::ScalarType compute_dtype, Kind kind);
  ~ShardedParameters() override;

  // Takes this rank's slices from the module's (full, fp32 or compute dtype) parameters, turns
  // the parameters into compute copies, and frees what this mode does not keep. Once, after the
  // weights are final (loaded, broadcast or restored). No communication.
  void shard_from_module();

  // model::LayerScope: gathers a layer before it runs (parameters mode) and, after its backward
  // pass, reduce-scatters its gradients (gradients, parameters) and frees it again. Communicates.
  void enter(int64_t layer, model::LayerPass pass) override;
  void exit(int64_t layer, model::LayerPass pass) override;

  // The update, in order (all communicate): gradients of the buckets not reduced during backward
  // into the fp32 slices; the global L2 norm over all slices, clipped to max_norm (<= 0: none;
  // returns the norm before clipping); AdamW on the slices; the new weights into the compute
  // copies. zero_grad() clears the slices and the module's .grad.
  void reduce_gradients();
  double clip_grad_norm(double max_norm);
  void step(double lr, const AdamWSettings& settings);
  void zero_grad();

  // Parameters mode: every layer gathered until release_all() (evaluation, rollouts, export).
  // Other modes: nothing to do. Communicates.
  void gather_all();
  void release_all();
  // Ends sharding (communicates): the module's parameters become full fp32 tensors holding the
  // master weights, the scope does nothing more. For the artifact written after training.
  void unshard_to_module();

  // Checkpoints (communicate; only the main rank receives tensors, in host memory, one bucket at
  // a time on the device): the fp32 master weights under the parameters' names, and the AdamW
  // state as TrainingOptimizer::state_tensors names it. load_state takes that state (any world
  // size) and keeps this rank's slices.
  io::NamedTensors full_master_weights();
  io::NamedTensors full_optimizer_state();
  void load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                  const std::string& where);

  // Bytes this object holds beyond the module's parameters and .grad (slices, moments).
  StateBytes own_bytes() const;
  ShardMode mode() const { return mode_; }
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Member {
    NamedParameter parameter;
    std::vector<int64_t> shape;
    int64_t numel = 0, offset = 0;  // in the bucket's flat layout
  };
  struct Bucket {
    int64_t layer = -1;  // -1: root
    std::vector<Member> members;
    int64_t numel = 0, padded = 0, shard = 0;
    at::Tensor master, grad, exp_avg, exp_avg_sq;  // kTrained: fp32 slices
    at::Tensor frozen;                             // kFrozen: the compute-dtype slice
    at::Tensor flat;  // the compute copies' buffer (padded); undefined while they are freed
  };

  bool lazily_gathered(const Bucket& bucket) const;  // parameters mode, a layer bucket
  Bucket* layer_bucket(int64_t layer);
  // The parameters of `bucket` become views into `flat` (its padded compute copy).
  void install_views(Bucket& bucket, const at::Tensor& flat);
  // The compute copies of `bucket` from the slices (all_gather), as views into one flat buffer.
  void gather(Bucket& bucket);
  void release(Bucket& bucket);
  // The bucket's .grad tensors, summed over ranks into the fp32 slice; the .grad are dropped.
  void reduce_bucket_gradients(Bucket& bucket);
  // The full fp32 masters (or moments) of one bucket on the main rank, per member.
  void gather_full(Bucket& bucket, const at::Tensor& slice, const std::string& prefix,
                   io::NamedTensors& out);

  Communicator& comm_;
  ShardMode mode_;
  at::ScalarType compute_dtype_;
  Kind kind_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_layer_;  // decoder layer -> index in buckets_, -1: none
  bool sharded_ = false;
  bool gathered_all_ = false;
  int64_t adam_step_ = 0;
};

}  // namespace rqat::train
