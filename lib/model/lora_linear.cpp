// See lora_linear.h.
#include "model/lora_linear.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
// function.h: where torch <= 2.11 declares get_current_node (later ones moved it to node.h, which
// function.h still includes).
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <mutex>

#include "io/error.h"

namespace rqat::model {

namespace {

// Stable across platforms and runs (std::hash is neither): FNV-1a of the layer name, combined with
// the seed and a stream number through splitmix64's finalizer, so that nearby seeds, names and
// draws give unrelated generator seeds.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Stream 0 initializes A; stream n + 1 is dropout draw n.
uint64_t stream_seed(uint64_t seed, const std::string& name, uint64_t stream) {
  return splitmix64(splitmix64(splitmix64(seed) ^ fnv1a(name)) ^ stream);
}

// The device the base computes on: that of its first parameter or buffer (a packed GPTQ layer has
// only buffers), else the CPU.
c10::Device device_of(const Linear& base) {
  for (const auto& p : base.parameters(/*recurse=*/true)) return p.device();
  for (const auto& b : base.buffers(/*recurse=*/true)) return b.device();
  return c10::kCPU;
}

// A checkpoint recompute that never comes (a forward without autograd in training mode outside
// activation checkpointing, e.g. scoring) leaves its draw behind; keep only the newest ones.
constexpr size_t kMaxReplay = 4096;

}  // namespace

void LoraOptions::validate() const {
  if (rank < 1) fail("--lora-rank must be at least 1, got {}", rank);
  if (!std::isfinite(alpha) || alpha <= 0) fail("--lora-alpha must be > 0, got {}", alpha);
  if (!(dropout >= 0 && dropout < 1)) fail("--lora-dropout must be in [0, 1), got {}", dropout);
}

LoraLinear::LoraLinear(std::shared_ptr<Linear> base, const LoraOptions& options,
                       const std::string& name)
    : base_(std::move(base)), options_(options), name_(name) {
  if (!base_) fail("{}: LoRA needs a base layer", name_);
  if (std::dynamic_pointer_cast<LoraLinear>(base_)) fail("{}: already has a LoRA adapter", name_);
  options_.validate();
  scale_ = options_.alpha / static_cast<double>(options_.rank);
  register_module("base_layer", base_);
  for (auto& p : base_->parameters(/*recurse=*/true)) p.requires_grad_(false);

  const int64_t in = base_->in_features(), out = base_->out_features();
  // Drawn on the CPU so that A does not depend on the device; kaiming_uniform_(a = sqrt(5)) on a
  // (rank, in) weight has bound gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + a^2)), which is
  // 1 / sqrt(in).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(stream_seed(options_.seed, name_, 0));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto a = at::empty({options_.rank, in}, at::kFloat).uniform_(-bound, bound, gen);
  const auto device = device_of(*base_);
  lora_A_ = register_parameter("lora_A", a.to(device));
  lora_B_ = register_parameter(
      "lora_B", at::zeros({out, options_.rank}, at::device(device).dtype(at::kFloat)));
}

at::Tensor LoraLinear::forward(const at::Tensor& x) {
  at::Tensor y = base_->forward(x);
  at::Tensor h = x.to(at::kFloat);
  if (is_training() && options_.dropout > 0) h = dropout(h);
  // Scaling the rank-sized intermediate is the cheapest place for it.
  at::Tensor delta = at::linear(at::linear(h, lora_A_) * scale_, lora_B_);
  return y + delta.to(y.scalar_type());
}

uint64_t LoraLinear::next_draw() {
  // Inside a backward pass this forward is a checkpoint's recompute of a block whose first pass
  // ran without autograd (and recorded its draw); the latest such draw belongs to it, since the
  // backward pass visits the most recent forward first.
  if (torch::autograd::get_current_node() && !replay_.empty()) {
    const uint64_t draw = replay_.back();
    replay_.pop_back();
    return draw;
  }
  const uint64_t draw = draws_++;
  if (!at::GradMode::is_enabled()) {
    if (replay_.size() == kMaxReplay) replay_.erase(replay_.begin());
    replay_.push_back(draw);
  }
  return draw;
}

at::Tensor LoraLinear::dropout(const at::Tensor& h) {
  const uint64_t draw = next_draw();
  const auto device = h.device();
  if (!generator_ || generator_->device() != device) {
    generator_ = device.is_cpu() ? at::make_generator<at::CPUGeneratorImpl>()
                                 : at::globalContext()
                                       .getAcceleratorHooksInterface(device.type())
                                       .getNewGenerator(device.index());
  }
  {
    std::lock_guard<std::mutex> lock(generator_->mutex());
    generator_->set_current_seed(stream_seed(options_.seed, name_, draw + 1));
  }
  const double keep = 1.0 - options_.dropout;
  // Inverted dropout, as torch.nn.Dropout: kept inputs are scaled by 1 / keep.
  auto mask = at::empty_like(h).bernoulli_(keep, *generator_).div_(keep);
  return h * mask;
}

at::Tensor LoraLinear::effective_weight() const {
  at::NoGradGuard no_grad;
  const at::Tensor w = base_->effective_weight().detach().to(at::kFloat);
  return w + at::matmul(lora_B_.detach(), lora_A_.detach()) * scale_;
}

}  // namespace rqat::model
