#include "train/training_optimizer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <map>
#include <tuple>

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

void fused_adamw_update(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& exp_avgs,
                        const std::vector<at::Tensor>& exp_avg_sqs, int64_t step, double lr,
                        const AdamWSettings& settings, double weight_decay, double grad_scale) {
  if (params.empty()) return;
  const auto on = at::TensorOptions(at::kFloat).device(params.front().device());
  // The kernel reads each tensor's step count (PyTorch's optimizer increments them before the
  // call); one shared count serves every tensor of the group.
  const at::Tensor count = at::full({}, static_cast<double>(step), on);
  const std::vector<at::Tensor> counts(params.size(), count);
  std::optional<at::Tensor> scale;
  if (grad_scale != 1) scale = at::full({}, grad_scale, on);
  at::NoGradGuard no_grad;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, counts, lr,
                    settings.beta1, settings.beta2, weight_decay, settings.eps,
                    /*amsgrad=*/false, /*maximize=*/false, scale, /*found_inf=*/std::nullopt);
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
  moments_.resize(parameters_.size());
}

TrainingOptimizer::~TrainingOptimizer() = default;

void TrainingOptimizer::set_lr(double lr) { lr_ = lr; }

void TrainingOptimizer::zero_grad() {
  grad_scale_ = 1;
  if (sharded_) return sharded_->zero_grad();
  for (auto& p : parameters_) p.tensor.mutable_grad() = at::Tensor();
}

void TrainingOptimizer::reduce_gradients(Communicator& comm) {
  if (sharded_) return sharded_->reduce_gradients();
  comm.all_reduce_gradients(tensors());
}

void TrainingOptimizer::step() {
  if (sharded_) return sharded_->step(lr_, settings_);
  // Parameters with a gradient, grouped by what one fused call needs alike: weight decay, step
  // count (a parameter without a gradient in some step, as torch's AdamW, keeps its own), device
  // and dtype. Usually two groups: the weight matrices and the rest.
  struct Group {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  };
  using Key = std::tuple<bool, int64_t, c10::DeviceType, c10::DeviceIndex, at::ScalarType>;
  std::map<Key, Group> groups;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].tensor;
    if (!p.grad().defined()) continue;
    Moments& m = moments_[i];
    if (!m.exp_avg.defined()) {
      m.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
      m.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
    }
    ++m.step;
    Group& g = groups[Key{parameters_[i].decay, m.step, p.device().type(), p.device().index(),
                          p.scalar_type()}];
    g.params.push_back(p);
    g.grads.push_back(p.grad());
    g.exp_avgs.push_back(m.exp_avg);
    g.exp_avg_sqs.push_back(m.exp_avg_sq);
  }
  for (auto& [key, g] : groups) {
    const double decay = std::get<0>(key) ? settings_.weight_decay : 0.0;
    fused_adamw_update(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, std::get<1>(key), lr_,
                       settings_, decay, grad_scale_);
  }
  grad_scale_ = 1;
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
  for (const auto& m : moments_) {
    if (!m.exp_avg.defined()) continue;
    bytes.moments += m.exp_avg.numel() * static_cast<int64_t>(m.exp_avg.element_size()) +
                     m.exp_avg_sq.numel() * static_cast<int64_t>(m.exp_avg_sq.element_size());
  }
  return bytes;
}

double TrainingOptimizer::clip_grad_norm(double max_norm) {
  if (sharded_) return sharded_->clip_grad_norm(max_norm);
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters_)
    if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad());
  if (grads.empty()) return 0.0;
  // Per-tensor norms (one multi-tensor kernel on a GPU), combined in float64: independent of how
  // parameters are grouped. No copy of a gradient in float64: that was a launch per tensor.
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const double total = at::stack(norms).to(at::kDouble).norm().item<double>();
  const double factor = clip_coefficient(total, max_norm);
  grad_scale_ = factor < 1 ? 1 / factor : 1.0;  // applied by the fused update in step()
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
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Moments& m = moments_[i];
    if (!m.exp_avg.defined()) continue;  // no step taken yet
    const std::string& name = parameters_[i].name;
    out.emplace_back("adam.exp_avg." + name, m.exp_avg);
    out.emplace_back("adam.exp_avg_sq." + name, m.exp_avg_sq);
    out.emplace_back("adam.step." + name, at::full({1}, m.step, at::kLong));
  }
  return out;
}

void TrainingOptimizer::load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                                   const std::string& where) {
  if (sharded_) return sharded_->load_state(lookup, where);
  moments_.assign(parameters_.size(), Moments{});
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const NamedParameter& p = parameters_[i];
    const at::Tensor step = lookup("adam.step." + p.name);
    if (!step.defined()) continue;  // saved before this parameter's first step
    const at::Tensor exp_avg = lookup("adam.exp_avg." + p.name);
    const at::Tensor exp_avg_sq = lookup("adam.exp_avg_sq." + p.name);
    if (!exp_avg.defined() || !exp_avg_sq.defined())
      fail("{}: optimizer state of {} is incomplete", where, p.name);
    if (exp_avg.sizes() != p.tensor.sizes() || exp_avg_sq.sizes() != p.tensor.sizes())
      fail("{}: optimizer state of {} has {} elements, the parameter {}", where, p.name,
           exp_avg.numel(), p.tensor.numel());
    moments_[i].step = step.item<int64_t>();
    moments_[i].exp_avg = exp_avg.to(p.tensor.options()).clone();
    moments_[i].exp_avg_sq = exp_avg_sq.to(p.tensor.options()).clone();
  }
}

}  // namespace rqat::train
