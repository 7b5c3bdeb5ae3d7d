// How data-parallel ranks split the training state, chosen by --shard (ZeRO stages 1-3, FSDP's
// NO_SHARD / SHARD_GRAD_OP / FULL_SHARD):
//   none        every rank holds the whole model, its gradients and AdamW state (plain DDP);
//   optimizer   fp32 master weights and AdamW moments are split over the ranks (ZeRO-1);
//   gradients   ... and gradients are reduce-scattered layer by layer during the backward pass,
//               each rank keeping the fp32 sum of its own slice only (ZeRO-2);
//   parameters  ... and each decoder layer's weights are gathered just before the layer runs
//               (forward and backward) and freed after it (ZeRO-3 / FULL_SHARD).
#pragma once

#include "io/enum_names.h"

namespace rqat::train {

enum class ShardMode { kNone, kOptimizer, kGradients, kParameters, kCount };
constexpr EnumNames<ShardMode> enum_names(ShardMode) {
  return {"none", "optimizer", "gradients", "parameters"};
}

}  // namespace rqat::train
