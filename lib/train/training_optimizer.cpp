#include "train/training_optimizer.h"

#include <torch/nn/utils/clip_grad.h>

#include <cmath>

#include "io/error.h"
#include "train/distributed.h"
#include "train/sharded_parameters.h"

namespace rqat::train {

std::vector<NamedParameter> trainable_parameters(torch::nn::Module& module) {
  std::vector<NamedParameter> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    const std::string& name = item.key();
    const bool matrix_weight =
        item.value().dim() >= 2 && name.size() >= 7 && name.ends_with(".weight");
    out.push_back({name, item.value(), matrix_weight});
  }
  return out;
}

std::vector<NamedParameter> all_parameters(torch::nn::Module& module) {
  std::vector<NamedParameter> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    out.push_back({item.key(), item.value(), false});
  return out;
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) return max_norm / (norm + 1e-6);
  return 1.0;
}

void AdamWSettings::validate() const {
  if (!(beta1 >= 0 && beta1 < 1)) fail("--adam-beta1 must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("--adam-beta2 must be in [0, 1), got {}", beta2);
  if (!(eps > 0)) fail("--adam-eps must be > 0, got {}", eps);
  if (!(weight_decay >= 0)) fail("--weight-decay must be >= 0, got {}", weight_decay);
}

ShardOptions shard_options(ShardMode mode, Communicator& comm, bool bf16_compute) {
  ShardOptions options;
  options.mode = mode;
  options.comm = &comm;
  options.compute_dtype = mode != ShardMode::kNone && bf16_compute ? at::kBFloat16 : at::kFloat;
  return options;
}

TrainingOptimizer::TrainingOptimizer(std::vector<NamedParameter> parameters,
                                     const AdamWSettings& settings, ShardOptions shard)
    : parameters_(std::move(parameters)), settings_(settings), lr_(settings.lr), shard_(shard) {
  settings.validate();
  if (parameters_.empty()) fail("training: the model has no trainable parameters");
  if (shard_.mode != ShardMode::kNone) {
    if (shard_.comm == nullptr) fail("training: --shard {} needs a communicator", enum_name(shard_.mode));
    sharded_ = std::make_unique<ShardedParameters>(parameters_, *shard_.comm, shard_.mode,
                                                   shard_.compute_dtype,
                                                   ShardedParameters::Kind::kTrained);
    return;
  }
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : parameters_) (p.decay ? decay : no_decay).push_back(p.tensor);
  auto options = torch::optim::AdamWOptions(settings.lr)
                     .betas({settings.beta1, settings.beta2})
                     .eps(settings.eps)
                     .weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) {
    auto decayed = std::make_unique<torch::optim::AdamWOptions>(options);
    decayed->weight_decay(settings.weight_decay);
    groups.emplace_back(decay, std::move(decayed));
  }
  if (!no_decay.empty())
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options));
  adamw_ = std::make_unique<torch::optim::AdamW>(std::move(groups), options);
  // libtorch merges a group's options with the optimizer's defaults, and takes a value equal to
  // AdamWOptions' own default as "not set": a decayed group's weight_decay of exactly 0.01 (the
  // default) became the defaults' 0 and decay was silently off. Set each group's decay after
  // construction, where nothing merges.
  auto& built = adamw_->param_groups();
  for (size_t g = 0; g < built.size(); ++g) {
    const bool decayed = g == 0 && !decay.empty();
    static_cast<torch::optim::AdamWOptions&>(built[g].options())
        .weight_decay(decayed ? settings.weight_decay : 0.0);
  }
}

TrainingOptimizer::~TrainingOptimizer() = default;

void TrainingOptimizer::set_lr(double lr) {
  lr_ = lr;
  if (sharded_) return;
  for (auto& group : adamw_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

void TrainingOptimizer::zero_grad() {
  if (sharded_) return sharded_->zero_grad();
  adamw_->zero_grad(/*set_to_none=*/true);
}

void TrainingOptimizer::reduce_gradients(Communicator& comm) {
  if (sharded_) return sharded_->reduce_gradients();
  comm.all_reduce_gradients(tensors());
}

void TrainingOptimizer::step() {
  if (sharded_) return sharded_->step(lr_, settings_);
  adamw_->step();
}

model::LayerScope* TrainingOptimizer::layer_scope() {
  const bool bracketed = shard_.mode == ShardMode::kGradients || shard_.mode == ShardMode::kParameters;
  return bracketed ? sharded_.get() : nullptr;
}

void TrainingOptimizer::weights_ready() {
  if (sharded_) sharded_->shard_from_module();
}

model::LayerScope* TrainingOptimizer::shard_frozen(std::vector<NamedParameter> parameters) {
  if (shard_.mode != ShardMode::kParameters) return nullptr;
  if (parameters.empty()) return nullptr;
  // A frozen model computes in the dtype it was loaded in (the teacher is bf16 on CUDA).
  const at::ScalarType dtype = parameters.front().tensor.scalar_type();
  frozen_.push_back(std::make_unique<ShardedParameters>(std::move(parameters), *shard_.comm,
                                                        shard_.mode, dtype,
                                                        ShardedParameters::Kind::kFrozen));
  frozen_.back()->shard_from_module();
  return frozen_.back().get();
}

void TrainingOptimizer::gather_all(bool frozen_too) {
  if (sharded_) sharded_->gather_all();
  if (frozen_too)
    for (auto& f : frozen_) f->gather_all();
}

void TrainingOptimizer::release_all() {
  if (sharded_) sharded_->release_all();
  for (auto& f : frozen_) f->release_all();
}

void TrainingOptimizer::unshard() {
  if (sharded_) sharded_->unshard_to_module();  // frozen models are not needed after training
}

io::NamedTensors TrainingOptimizer::master_weights() {
  return sharded_ ? sharded_->full_master_weights() : io::NamedTensors{};
}

StateBytes TrainingOptimizer::state_bytes(torch::nn::Module& module) const {
  StateBytes bytes;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    bytes.weights += p.numel() * static_cast<int64_t>(p.element_size());
    if (p.grad().defined())
      bytes.gradients += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
  }
  if (sharded_) {
    const StateBytes own = sharded_->own_bytes();
    bytes.gradients += own.gradients;
    bytes.master += own.master;
    bytes.moments += own.moments;
    return bytes;
  }
  for (const auto& [key, state] : adamw_->state()) {
    (void)key;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    bytes.moments += s.exp_avg().numel() * static_cast<int64_t>(s.exp_avg().element_size()) +
                     s.exp_avg_sq().numel() * static_cast<int64_t>(s.exp_avg_sq().element_size());
  }
  return bytes;
}

double TrainingOptimizer::clip_grad_norm(double max_norm) {
  if (sharded_) return sharded_->clip_grad_norm(max_norm);
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters_)
    if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad());
  if (grads.empty()) return 0.0;
  // The norm in float64 over per-tensor norms: independent of how parameters are grouped.
  std::vector<at::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.detach().to(at::kDouble).norm());
  const double total = at::stack(norms).norm().item<double>();
  if (const double factor = clip_coefficient(total, max_norm); factor < 1) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(factor);
  }
  return total;
}

std::vector<at::Tensor> TrainingOptimizer::tensors() const {
  std::vector<at::Tensor> out;
  for (const auto& p : parameters_) out.push_back(p.tensor);
  return out;
}

int64_t TrainingOptimizer::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters_) n += p.tensor.numel();
  return n;
}

io::NamedTensors TrainingOptimizer::state_tensors() {
  if (sharded_) return sharded_->full_optimizer_state();
  io::NamedTensors out;
  const auto& state = adamw_->state();
  for (const auto& p : parameters_) {
    const auto it = state.find(p.tensor.unsafeGetTensorImpl());
    if (it == state.end()) continue;  // no step taken yet
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.emplace_back("adam.exp_avg." + p.name, s.exp_avg());
    out.emplace_back("adam.exp_avg_sq." + p.name, s.exp_avg_sq());
    out.emplace_back("adam.step." + p.name, torch::tensor({s.step()}, torch::kLong));
  }
  return out;
}

void TrainingOptimizer::load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                                   const std::string& where) {
  if (sharded_) return sharded_->load_state(lookup, where);
  auto& state = adamw_->state();
  state.clear();
  for (const auto& p : parameters_) {
    const at::Tensor step = lookup("adam.step." + p.name);
    if (!step.defined()) continue;  // saved before this parameter's first step
    const at::Tensor exp_avg = lookup("adam.exp_avg." + p.name);
    const at::Tensor exp_avg_sq = lookup("adam.exp_avg_sq." + p.name);
    if (!exp_avg.defined() || !exp_avg_sq.defined())
      fail("{}: optimizer state of {} is incomplete", where, p.name);
    if (exp_avg.sizes() != p.tensor.sizes() || exp_avg_sq.sizes() != p.tensor.sizes())
      fail("{}: optimizer state of {} has {} elements, the parameter {}", where, p.name,
           exp_avg.numel(), p.tensor.numel());
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(step.item<int64_t>());
    s->exp_avg(exp_avg.to(p.tensor.options()).clone());
    s->exp_avg_sq(exp_avg_sq.to(p.tensor.options()).clone());
    state[p.tensor.unsafeGetTensorImpl()] = std::move(s);
  }
}

}  // namespace rqat::train
