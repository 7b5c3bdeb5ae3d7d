// RMSNorm: the inference fast path (float32, no gradient) against the composite and against the
// closed form, and the fused training path (forward and backward) against the composite's autograd
// in float64, on awkward shapes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/rms_norm.h"
#include "test_util.h"

TEST_CASE("rms_norm inference path equals the training path and the closed form") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  for (auto shape : {std::vector<int64_t>{1, 1, 8}, {3, 5, 48}, {2, 1, 4, 16}, {7, 1}}) {
    INFO("shape " << c10::str(at::IntArrayRef(shape)));
    auto x = at::randn(shape, gen) * 3;
    auto w = 1 + 0.1 * at::randn({shape.back()}, gen);
    at::Tensor training;
    {
      at::AutoGradMode enable(true);
      training = rqat::ops::rms_norm(x, w, 1e-6).detach();
    }
    at::Tensor inference;
    {
      at::NoGradGuard no_grad;
      inference = rqat::ops::rms_norm(x, w, 1e-6);
    }
    auto closed_form = w * x / at::sqrt(x.pow(2).mean(-1, true) + 1e-6);
    // Both are float32 computations of the same formula with different summation orders: a few
    // ulps of the result (|y| <= ~5 here), so 1e-5 absolute.
    CHECK((inference - training).abs().max().item<double>() < 1e-5);
    CHECK((inference - closed_form).abs().max().item<double>() < 1e-5);
    // Training now takes the same loop (ops/rms_norm.h): the composite, its twin, is the other
    // formulation to agree with.
    CHECK((inference - rqat::ops::rms_norm_ref(x, w, 1e-6)).abs().max().item<double>() < 1e-5);
  }
  // bf16 stays on the composite, which normalizes in float32.
  at::NoGradGuard no_grad;
  auto x = at::randn({4, 32}, gen).to(at::kBFloat16);
  auto w = at::ones({32}, at::kBFloat16);
  auto y = rqat::ops::rms_norm(x, w, 1e-6);
  CHECK(y.scalar_type() == at::kBFloat16);
  auto ref = (x.to(at::kFloat) / at::sqrt(x.to(at::kFloat).pow(2).mean(-1, true) + 1e-6));
  CHECK((y.to(at::kFloat) - ref).abs().max().item<double>() < 0.02);
}

namespace {

struct FusedCase {
  std::vector<int64_t> shape;
  bool x_grad, w_grad, transposed, zero_row;
};

}  // namespace

// The fused training path (rqat's CPU loops under their own autograd function) against the
// composite's autograd in float64 from the same inputs: output, dx and dw within 1e-5 of each one's
// largest entry (float32 sums of up to a few thousand terms in another order: ~1e-6 seen).
TEST_CASE("rms_norm's fused forward and backward equal the float64 composite") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(32);
  const FusedCase cases[] = {
      {{1, 1}, true, true, false, false},
      {{33, 48}, true, true, false, false},       // rows across a weight-gradient block
      {{65, 7}, true, true, false, true},         // a zero row, an odd width
      {{2, 5, 3, 16}, true, true, false, false},  // Qwen3's q/k norm shape
      {{3, 40}, false, true, false, false},       // only the weight learns
      {{9, 1024}, true, false, false, false},     // a frozen weight (LoRA's base, the teacher)
      {{6, 24}, true, true, true, false},         // x a transposed (non-contiguous) view
  };
  for (const auto& c : cases) {
    INFO("shape " << c10::str(at::IntArrayRef(c.shape)) << " x grad " << c.x_grad << " w grad "
                  << c.w_grad << " transposed " << c.transposed);
    at::AutoGradMode enable(true);
    auto base = at::randn(c.shape, gen) * 3;
    if (c.zero_row) base.view({-1, c.shape.back()})[0].zero_();
    auto x = c.transposed ? base.t().contiguous().t() : base.clone();
    auto w = 1 + 0.2 * at::randn({c.shape.back()}, gen);
    auto x64 = x.to(at::kDouble), w64 = w.to(at::kDouble);
    x.requires_grad_(c.x_grad);
    x64.requires_grad_(c.x_grad);
    w.requires_grad_(c.w_grad);
    w64.requires_grad_(c.w_grad);
    const auto y = rqat::ops::fused_rms_norm(x, w, 1e-6);
    const auto y64 = rqat::ops::rms_norm_ref(x64, w64, 1e-6);
    const auto relative = [](const at::Tensor& got, const at::Tensor& want) {
      return ((got.to(at::kDouble) - want).abs().max() / want.abs().max().clamp_min(1e-300))
          .item<double>();
    };
    CHECK(y.scalar_type() == at::kFloat);
    CHECK(y.sizes() == x.sizes());
    CHECK(relative(y.detach(), y64.detach()) < 1e-5);
    std::vector<at::Tensor> inputs, inputs64;
    if (c.x_grad) inputs.push_back(x), inputs64.push_back(x64);
    if (c.w_grad) inputs.push_back(w), inputs64.push_back(w64);
    const auto g = at::randn(c.shape, gen);
    const auto grads = torch::autograd::grad({y}, inputs, {g});
    const auto grads64 = torch::autograd::grad({y64}, inputs64, {g.to(at::kDouble)});
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("gradient " << i);
      CHECK(grads[i].sizes() == inputs[i].sizes());
      CHECK(relative(grads[i], grads64[i]) < 1e-5);
    }
  }
}

TEST_CASE("rms_norm's fused backward gives the same bits on 1 and 2 threads") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(33);
  const auto x0 = at::randn({200, 96}, gen), w0 = 1 + 0.1 * at::randn({96}, gen),
             g = at::randn({200, 96}, gen);
  const auto grads_on = [&](int threads) {
    at::set_num_threads(threads);
    at::AutoGradMode enable(true);
    auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const auto y = rqat::ops::fused_rms_norm(x, w, 1e-6);
    const auto grads = torch::autograd::grad({y}, {x, w}, {g});
    return std::vector<at::Tensor>{y.detach(), grads[0], grads[1]};
  };
  const int threads_before = at::get_num_threads();
  const auto one = grads_on(1), two = grads_on(2);
  at::set_num_threads(threads_before);
  for (size_t i = 0; i < one.size(); ++i) CHECK(at::equal(one[i], two[i]));
}

TEST_CASE("rms_norm refuses a weight of the wrong width and names the shapes") {
  at::AutoGradMode enable(true);
  const auto x = at::randn({2, 8}), w = at::ones({7});
  CHECK_THROWS_WITH(rqat::ops::fused_rms_norm(x, w, 1e-6),
                    Catch::Contains("rms_norm: expected x (..., dim)") && Catch::Contains("[7]"));
  CHECK_THROWS_WITH(rqat::ops::fused_rms_norm(x.to(at::kDouble), w.to(at::kDouble), 1e-6),
                    Catch::Contains("rms_norm: expected x (..., dim)"));
  CHECK_THROWS_WITH(rqat::ops::fused_rms_norm(x.to(at::kDouble), at::ones({8}, at::kDouble), 1e-6),
                    Catch::Contains("the fused path takes float32 CPU tensors"));
}
