#include "model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/utils.h>

namespace rqat::model {
namespace {

// Autograd keeps non-tensor state in IValues; a capsule carries the block function to backward.
// The autocast state of the forward, to recompute under it: the backward runs outside the
// caller's autocast scope, and a recompute in other dtypes would give other activations (or
// mixed-dtype errors), as PyTorch's checkpoint also guards against.
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState current() {
    return {at::autocast::is_autocast_enabled(at::kCPU), at::autocast::is_autocast_enabled(at::kCUDA),
            at::autocast::get_autocast_dtype(at::kCPU), at::autocast::get_autocast_dtype(at::kCUDA)};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

// Sets `state` for its lifetime (and a fresh autocast cache), then puts the previous one back.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& state) : previous_(AutocastState::current()) {
    state.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastRestore() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }

 private:
  AutocastState previous_;
};

struct BlockHolder : torch::CustomClassHolder {
  BlockHolder(BlockFunction f, BlockBrackets b) : block(std::move(f)), brackets(std::move(b)) {}
  BlockFunction block;
  BlockBrackets brackets;
  AutocastState autocast = AutocastState::current();
  void before(bool backward) const {
    if (brackets.before) brackets.before(backward);
  }
  void after(bool backward) const {
    if (brackets.after) brackets.after(backward);
  }
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
    holder->before(false);
    at::Tensor y = holder->block(x);
    holder->after(false);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto holder =
        c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor x_again = x.detach().requires_grad_(x.requires_grad());
    holder->before(true);
    at::Tensor y;
    {
      torch::AutoGradMode enable(true);
      AutocastRestore autocast(holder->autocast);
      y = holder->block(x_again);
    }
    // Re-entrant backward through the recomputed block: parameter gradients accumulate into their
    // .grad; the input's gradient is returned to the outer graph.
    torch::autograd::backward({y}, {grad_outputs[0]});
    y = at::Tensor();  // the recomputed activations go before after() (which may free weights)
    holder->after(true);
    at::Tensor grad_x = x.requires_grad() ? x_again.grad() : at::Tensor();
    return {grad_x, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_block(const BlockFunction& block, const at::Tensor& x,
                              const BlockBrackets& brackets) {
  if (!torch::GradMode::is_enabled()) {
    if (brackets.before) brackets.before(false);
    at::Tensor y = block(x);
    if (brackets.after) brackets.after(false);
    return y;
  }
  static thread_local at::Tensor anchor = torch::zeros({}, torch::requires_grad());
  return CheckpointFunction::apply(x, anchor, c10::make_intrusive<BlockHolder>(block, brackets));
}

}  // namespace rqat::model
