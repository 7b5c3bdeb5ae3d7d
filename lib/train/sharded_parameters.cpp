#include "train/sharded_parameters.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "io/error.h"
#include "model/decoder.h"
#include "train/training_optimizer.h"

namespace rqat::train {
namespace {

// "model.layers.12.mlp.up_proj.weight" -> 12; anything else -> -1 (the root bucket).
int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return -1;
  int64_t layer = -1;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc() || ptr == end || *ptr != '.') return -1;
  return layer;
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

at::Tensor empty_parameter(const at::Tensor& like, at::ScalarType dtype) {
  return at::empty({0}, like.options().dtype(dtype));
}

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace

void use_compute_dtype(model::CausalLM& model, at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  // Frozen weights (a QLoRA base, frozen embeddings, a reference policy's adapters) join the
  // compute dtype. Frozen quantizer parameters (scales, zeros, clipping logits) keep float32: the
  // exported codes are made from them, and FakeQuantLinear casts its grid to the weight's dtype
  // when it computes.
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    at::Tensor p = item.value();
    const std::string& name = item.key();
    const bool quantizer = name.ends_with(".scales") || name.ends_with(".zeros") ||
                           name.ends_with(".clip_gamma") || name.ends_with(".clip_beta");
    if (!p.requires_grad() && !quantizer && p.is_floating_point() && p.scalar_type() != dtype)
      p.set_data(p.to(dtype));
  }
  model.set_compute_dtype(dtype);
}

ShardedParameters::ShardedParameters(std::vector<NamedParameter> parameters, Communicator& comm,
                                     ShardMode mode, at::ScalarType compute_dtype, Kind kind)
    : comm_(comm), mode_(mode), compute_dtype_(compute_dtype), kind_(kind) {
  if (mode_ == ShardMode::kNone) fail("sharded parameters: --shard none shards nothing");
  if (parameters.empty()) fail("sharded parameters: the model has no parameters to shard");
  // Buckets: root first, then layers in order; members in registration order.
  std::map<int64_t, Bucket> by_layer;
  for (auto& p : parameters) {
    Bucket& bucket = by_layer[layer_of(p.name)];
    Member m;
    m.shape = p.tensor.sizes().vec();
    m.numel = p.tensor.numel();
    m.offset = bucket.numel;
    bucket.numel += m.numel;
    m.parameter = std::move(p);
    bucket.members.push_back(std::move(m));
  }
  const int64_t world = comm_.world_size();
  for (auto& [layer, bucket] : by_layer) {
    bucket.layer = layer;
    bucket.padded = round_up(std::max<int64_t>(bucket.numel, 1), world);
    bucket.shard = bucket.padded / world;
    if (layer >= 0) {
      if (static_cast<size_t>(layer) >= bucket_of_layer_.size())
        bucket_of_layer_.resize(static_cast<size_t>(layer) + 1, -1);
      bucket_of_layer_[static_cast<size_t>(layer)] = static_cast<int64_t>(buckets_.size());
    }
    buckets_.push_back(std::move(bucket));
  }
}

ShardedParameters::~ShardedParameters() = default;

bool ShardedParameters::lazily_gathered(const Bucket& bucket) const {
  return mode_ == ShardMode::kParameters && bucket.layer >= 0;
}

ShardedParameters::Bucket* ShardedParameters::layer_bucket(int64_t layer) {
  // Null for a layer with nothing to shard (e.g. frozen layers of a LoRA model).
  const auto index = static_cast<size_t>(layer);
  if (layer < 0 || index >= bucket_of_layer_.size() || bucket_of_layer_[index] < 0) return nullptr;
  return &buckets_[static_cast<size_t>(bucket_of_layer_[index])];
}

void ShardedParameters::shard_from_module() {
  if (sharded_) fail("sharded parameters: already sharded");
  torch::NoGradGuard no_grad;
  const int64_t begin_of_mine = comm_.rank();
  for (auto& bucket : buckets_) {
    const auto device = bucket.members.front().parameter.tensor.device();
    // This rank's slice of the flat bucket, gathered from the (identical) full parameters.
    const at::ScalarType slice_dtype = kind_ == Kind::kTrained ? at::kFloat : compute_dtype_;
    at::Tensor slice = at::zeros({bucket.shard}, at::TensorOptions(slice_dtype).device(device));
    const int64_t lo = begin_of_mine * bucket.shard, hi = lo + bucket.shard;
    for (const auto& m : bucket.members) {
      const int64_t a = std::max(lo, m.offset), b = std::min(hi, m.offset + m.numel);
      if (a >= b) continue;
      slice.narrow(0, a - lo, b - a)
          .copy_(m.parameter.tensor.detach().reshape({-1}).narrow(0, a - m.offset, b - a));
    }
    if (kind_ == Kind::kTrained) {
      bucket.master = slice;
      bucket.grad = at::zeros_like(slice);
      if (!bucket.exp_avg.defined()) {  // else restored by load_state
        bucket.exp_avg = at::zeros_like(slice);
        bucket.exp_avg_sq = at::zeros_like(slice);
      }
    } else {
      bucket.frozen = slice;
    }
    if (lazily_gathered(bucket)) {
      release(bucket);
    } else {
      // Compute copies as views into one flat buffer, so that publishing the update is a
      // single all_gather into it.
      at::Tensor flat = at::zeros({bucket.padded}, at::TensorOptions(compute_dtype_).device(device));
      for (const auto& m : bucket.members)
        flat.narrow(0, m.offset, m.numel)
            .copy_(m.parameter.tensor.detach().reshape({-1}).to(compute_dtype_));
      install_views(bucket, flat);
    }
  }
  sharded_ = true;
}

void ShardedParameters::gather(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  const auto device = (kind_ == Kind::kTrained ? bucket.master : bucket.frozen).device();
  at::Tensor flat = at::empty({bucket.padded}, at::TensorOptions(compute_dtype_).device(device));
  const at::Tensor slice = kind_ == Kind::kTrained ? bucket.master.to(compute_dtype_) : bucket.frozen;
  comm_.all_gather(slice, flat);
  install_views(bucket, flat);
}

void ShardedParameters::install_views(Bucket& bucket, const at::Tensor& flat) {
  for (auto& m : bucket.members) {
    at::Tensor p = m.parameter.tensor;
    p.set_data(flat.narrow(0, m.offset, m.numel).view(m.shape));
  }
  bucket.flat = flat;
}

void ShardedParameters::release(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  for (auto& m : bucket.members) {
    at::Tensor p = m.parameter.tensor;
    p.set_data(empty_parameter(p, compute_dtype_));
  }
  bucket.flat = at::Tensor();
}

void ShardedParameters::reduce_bucket_gradients(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  // Reductions in fp32 whatever the compute dtype.
  at::Tensor flat =
      at::zeros({bucket.padded}, at::TensorOptions(at::kFloat).device(bucket.grad.device()));
  for (auto& m : bucket.members) {
    at::Tensor& grad = m.parameter.tensor.mutable_grad();
    if (!grad.defined()) continue;
    flat.narrow(0, m.offset, m.numel).copy_(grad.reshape({-1}));
    grad = at::Tensor();
  }
  at::Tensor part = at::empty_like(bucket.grad);
  comm_.reduce_scatter_sum(flat, part);
  bucket.grad.add_(part);
}

void ShardedParameters::enter(int64_t layer, model::LayerPass) {
  if (!sharded_ || gathered_all_ || mode_ != ShardMode::kParameters) return;
  if (Bucket* bucket = layer_bucket(layer); bucket != nullptr && !bucket->flat.defined())
    gather(*bucket);
}

void ShardedParameters::exit(int64_t layer, model::LayerPass pass) {
  if (!sharded_) return;
  Bucket* bucket = layer_bucket(layer);
  if (bucket == nullptr) return;
  const bool backward = pass == model::LayerPass::kBackward;
  if (backward && kind_ == Kind::kTrained && mode_ != ShardMode::kOptimizer)
    reduce_bucket_gradients(*bucket);
  if (!gathered_all_ && lazily_gathered(*bucket)) release(*bucket);
}

void ShardedParameters::reduce_gradients() {
  for (auto& bucket : buckets_) {
    // Layers of the gradients and parameters modes were reduced as their backward ended; a
    // gradient still there would be one that arrived outside the bracketed backward.
    const bool reduced_in_backward = mode_ != ShardMode::kOptimizer && bucket.layer >= 0;
    if (reduced_in_backward) {
      for (const auto& m : bucket.members)
        if (m.parameter.tensor.grad().defined())
          fail("sharded training: {} got a gradient outside its layer's backward pass",
               m.parameter.name);
      continue;
    }
    reduce_bucket_gradients(bucket);
  }
}

double ShardedParameters::clip_grad_norm(double max_norm) {
  // Sum of squares in float64, over this rank's slices, then over ranks.
  at::Tensor local = at::zeros({}, at::TensorOptions(at::kDouble).device(buckets_.front().grad.device()));
  for (const auto& bucket : buckets_) local += bucket.grad.to(at::kDouble).pow(2).sum();
  const double total = std::sqrt(comm_.all_reduce_sum(local.item<double>()));
  if (const double factor = clip_coefficient(total, max_norm); factor < 1)
    for (auto& bucket : buckets_) bucket.grad.mul_(factor);
  return total;
}

void ShardedParameters::step(double lr, const AdamWSettings& s) {
  torch::NoGradGuard no_grad;
  ++adam_step_;
  const int64_t rank = comm_.rank();
  for (auto& bucket : buckets_) {
    // Decoupled weight decay on the weight matrices' elements of this slice, as TrainingOptimizer
    // (the fused update below applies its own decay first too; here it is 0).
    if (s.weight_decay != 0) {
      const int64_t lo = rank * bucket.shard, hi = lo + bucket.shard;
      for (const auto& m : bucket.members) {
        if (!m.parameter.decay) continue;
        const int64_t a = std::max(lo, m.offset), b = std::min(hi, m.offset + m.numel);
        if (a < b) bucket.master.narrow(0, a - lo, b - a).mul_(1 - lr * s.weight_decay);
      }
    }
    // The AdamW update of TrainingOptimizer, on the flat slice: one fused kernel.
    fused_adamw_update({bucket.master}, {bucket.grad}, {bucket.exp_avg}, {bucket.exp_avg_sq},
                       adam_step_, lr, s, /*weight_decay=*/0.0, /*grad_scale=*/1.0);
    // Publish into the flat buffer behind the compute copies (lazily gathered layers take the
    // new masters when they next run).
    if (!lazily_gathered(bucket)) comm_.all_gather(bucket.master.to(compute_dtype_), bucket.flat);
  }
}

void ShardedParameters::zero_grad() {
  for (auto& bucket : buckets_) {
    if (bucket.grad.defined()) bucket.grad.zero_();
    for (auto& m : bucket.members) m.parameter.tensor.mutable_grad() = at::Tensor();
  }
}

void ShardedParameters::gather_all() {
  if (!sharded_ || gathered_all_) return;
  for (auto& bucket : buckets_)
    if (!bucket.flat.defined()) gather(bucket);
  gathered_all_ = true;
}

void ShardedParameters::release_all() {
  if (!sharded_ || !gathered_all_) return;
  gathered_all_ = false;
  for (auto& bucket : buckets_)
    if (lazily_gathered(bucket)) release(bucket);
}

void ShardedParameters::unshard_to_module() {
  if (!sharded_) return;
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    const at::Tensor slice = kind_ == Kind::kTrained ? bucket.master : bucket.frozen;
    at::Tensor flat = at::empty({bucket.padded}, slice.options());
    comm_.all_gather(slice, flat);
    for (auto& m : bucket.members) {
      at::Tensor p = m.parameter.tensor;
      p.set_data(flat.narrow(0, m.offset, m.numel).view(m.shape).clone());
    }
    bucket.flat = at::Tensor();
    bucket.master = bucket.grad = bucket.exp_avg = bucket.exp_avg_sq = bucket.frozen = at::Tensor();
  }
  sharded_ = false;
}

void ShardedParameters::gather_full(Bucket& bucket, const at::Tensor& slice,
                                    const std::string& prefix, io::NamedTensors& out) {
  at::Tensor flat = at::empty({bucket.padded}, slice.options());
  comm_.all_gather(slice, flat);
  if (!comm_.is_main()) return;
  const at::Tensor host = flat.cpu();
  for (const auto& m : bucket.members)
    out.emplace_back(prefix + m.parameter.name,
                     host.narrow(0, m.offset, m.numel).view(m.shape).clone());
}

io::NamedTensors ShardedParameters::full_master_weights() {
  io::NamedTensors out;
  if (kind_ != Kind::kTrained) return out;
  for (auto& bucket : buckets_) gather_full(bucket, bucket.master, "", out);
  return out;
}

io::NamedTensors ShardedParameters::full_optimizer_state() {
  io::NamedTensors out;
  if (kind_ != Kind::kTrained || adam_step_ == 0) return out;  // as torch's AdamW: no state yet
  for (auto& bucket : buckets_) {
    gather_full(bucket, bucket.exp_avg, "adam.exp_avg.", out);
    gather_full(bucket, bucket.exp_avg_sq, "adam.exp_avg_sq.", out);
    if (comm_.is_main())
      for (const auto& m : bucket.members)
        out.emplace_back("adam.step." + m.parameter.name, at::tensor({adam_step_}, at::kLong));
  }
  return out;
}

void ShardedParameters::load_state(const std::function<at::Tensor(const std::string&)>& lookup,
                                   const std::string& where) {
  if (kind_ != Kind::kTrained) return;
  torch::NoGradGuard no_grad;
  int64_t step = -1;
  const int64_t rank = comm_.rank();
  for (auto& bucket : buckets_) {
    const int64_t lo = rank * bucket.shard, hi = lo + bucket.shard;
    at::Tensor avg = at::zeros({bucket.shard}, at::kFloat), avg_sq = at::zeros_like(avg);
    for (const auto& m : bucket.members) {
      const std::string& name = m.parameter.name;
      const at::Tensor saved_step = lookup("adam.step." + name);
      if (!saved_step.defined()) continue;  // saved before the first update
      const at::Tensor a = lookup("adam.exp_avg." + name);
      const at::Tensor b = lookup("adam.exp_avg_sq." + name);
      if (!a.defined() || !b.defined())
        fail("{}: optimizer state of {} is incomplete", where, name);
      if (a.numel() != m.numel || b.numel() != m.numel)
        fail("{}: optimizer state of {} has {} elements, the parameter {}", where, name,
             a.numel(), m.numel);
      // One step count for all: a run (sharded or not) updates every parameter at every step.
      step = std::max(step, saved_step.item<int64_t>());
      const int64_t x = std::max(lo, m.offset), y = std::min(hi, m.offset + m.numel);
      if (x >= y) continue;
      avg.narrow(0, x - lo, y - x).copy_(a.reshape({-1}).narrow(0, x - m.offset, y - x));
      avg_sq.narrow(0, x - lo, y - x).copy_(b.reshape({-1}).narrow(0, x - m.offset, y - x));
    }
    const auto device = bucket.members.front().parameter.tensor.device();
    bucket.exp_avg = avg.to(device);
    bucket.exp_avg_sq = avg_sq.to(device);
    if (!bucket.grad.defined()) bucket.grad = at::zeros_like(bucket.exp_avg);
  }
  adam_step_ = std::max<int64_t>(step, 0);
}

StateBytes ShardedParameters::own_bytes() const {
  StateBytes bytes;
  for (const auto& bucket : buckets_) {
    bytes.gradients += tensor_bytes(bucket.grad);
    bytes.master += tensor_bytes(bucket.master);
    bytes.moments += tensor_bytes(bucket.exp_avg) + tensor_bytes(bucket.exp_avg_sq);
    bytes.weights += tensor_bytes(bucket.frozen);
  }
  return bytes;
}

}  // namespace rqat::train
