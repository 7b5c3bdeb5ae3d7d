#include "model/activation_checkpoint.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>

namespace rqat::model {
namespace {

// Autograd keeps non-tensor state in IValues; a capsule carries the block function to backward.
struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(BlockFunction f) : block(std::move(f)) {}
  BlockFunction block;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `anchor` is a scalar that requires grad: it makes the output part of the graph even when x
  // does not require grad, so backward still runs and reaches the block's parameters.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& anchor, c10::intrusive_ptr<BlockHolder> holder) {
    ctx->saved_data["block"] = c10::IValue::make_capsule(holder);
    ctx->save_for_backward({x});
    (void)anchor;
    torch::NoGradGuard no_grad;
    return holder->block(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto holder =
        c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor x_again = x.detach().requires_grad_(x.requires_grad());
    at::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = holder->block(x_again);
    }
    // Re-entrant backward through the recomputed block: parameter gradients accumulate into their
    // .grad; the input's gradient is returned to the outer graph.
    torch::autograd::backward({y}, {grad_outputs[0]});
    at::Tensor grad_x = x.requires_grad() ? x_again.grad() : at::Tensor();
    return {grad_x, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_block(const BlockFunction& block, const at::Tensor& x) {
  if (!torch::GradMode::is_enabled()) return block(x);
  static thread_local at::Tensor anchor = torch::zeros({}, torch::requires_grad());
  return CheckpointFunction::apply(x, anchor, c10::make_intrusive<BlockHolder>(block));
}

}  // namespace rqat::model
