// Activation checkpointing: run a block without keeping its intermediate activations, and run it
// again during the backward pass to get its gradients. Long reasoning traces (thousands of
// tokens) otherwise keep every attention and MLP intermediate of every block alive until the
// backward pass; with checkpointing only each block's input is kept, at the cost of one more
// forward per block.
//
// The backward recomputes `block(x)` with autograd on and back-propagates through it: gradients of
// the block's parameters (and of anything the block derives them from, such as a fake-quantized
// layer's master weight) accumulate into their .grad as in a plain backward, and the gradient of
// x is passed on. The block must be deterministic (no dropout), which holds for rqat's decoder.
#pragma once

#include <ATen/Tensor.h>

#include <functional>

namespace rqat::model {

using BlockFunction = std::function<at::Tensor(const at::Tensor&)>;

// Called before and after each run of the block (the forward, and the recompute + backward);
// `backward` tells which. Empty: nothing runs around the block.
struct BlockBrackets {
  std::function<void(bool backward)> before, after;
};

// y = block(x) with the activations of `block` freed after the forward. Falls back to a plain
// call when autograd is off (inference needs nothing saved). Parameters of the block get their
// gradients even when x itself does not require grad (e.g. frozen embeddings).
at::Tensor checkpointed_block(const BlockFunction& block, const at::Tensor& x,
                              const BlockBrackets& brackets = {});

}  // namespace rqat::model
