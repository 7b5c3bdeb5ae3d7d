// What runs around each decoder layer of a CausalLM when its weights do not live in the layer
// between uses (sharded training, train/sharded_parameters.h): enter() before the layer computes
// (the weights must then be in place), exit() after it. With autograd on, layers are then run
// under activation checkpointing (model/activation_checkpoint.h), so that the backward pass of
// layer i is also bracketed: enter(i, kBackward), recompute, back-propagate, exit(i, kBackward),
// at which point the gradients of layer i's parameters are complete for this backward pass.
#pragma once

#include <cstdint>

namespace rqat::model {

enum class LayerPass { kForward, kBackward };

class LayerScope {
 public:
  virtual ~LayerScope() = default;
  virtual void enter(int64_t layer, LayerPass pass) = 0;
  virtual void exit(int64_t layer, LayerPass pass) = 0;
};

}  // namespace rqat::model
