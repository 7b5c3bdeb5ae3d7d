// RMSNorm: the inference fast path (float32, no gradient) against the composite that training uses
// and against the closed form, on awkward shapes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

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
