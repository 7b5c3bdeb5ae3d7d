// The fused SwiGLU (ops/swiglu.h) against the closed form computed independently in float64
// (g / (1 + exp(-g)) * u and its derivatives), relative to the largest entry, on awkward shapes:
// one value, tails shorter than a vector, non-contiguous inputs, saturated gates, a frozen up.
// Inference (no gradient) keeps the composite bit for bit; the dispatcher takes the composite
// where the fused path does not apply.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/swiglu.h"
#include "test_util.h"

using namespace rqat;

namespace {

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

}  // namespace

TEST_CASE("the fused SwiGLU computes the closed form and its gradients", "[swiglu]") {
  const std::vector<std::vector<int64_t>> shapes = {{1}, {15}, {17}, {3, 5, 33}, {4, 688}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (double magnitude : {1.0, 40.0}) {
      for (bool frozen_up : {false, true}) {
        INFO("shape " << c10::str(at::IntArrayRef(shapes[i])) << ", magnitude " << magnitude
                      << (frozen_up ? ", frozen up" : ""));
        auto gen = generator(70 + i);
        auto gate = (at::randn(shapes[i], gen) * magnitude).requires_grad_();
        auto up = at::randn(shapes[i], gen).requires_grad_(!frozen_up);
        const auto dh = at::randn(shapes[i], gen);
        at::AutoGradMode enable(true);
        const auto h = ops::fused_swiglu(gate, up);
        std::vector<at::Tensor> inputs{gate};
        if (!frozen_up) inputs.push_back(up);
        const auto grads = torch::autograd::grad({h}, inputs, {dh});
        const auto g = gate.detach().to(at::kDouble), u = up.detach().to(at::kDouble);
        const auto d = dh.to(at::kDouble);
        const auto s = 1 / (1 + (-g).exp());
        CHECK(test::relative_to_largest(h, g * s * u) < ops::kSwigluTolerance);
        CHECK(test::relative_to_largest(grads[0], d * u * s * (1 + g * (1 - s))) <
              ops::kSwigluTolerance);
        if (!frozen_up)
          CHECK(test::relative_to_largest(grads[1], d * g * s) < ops::kSwigluTolerance);
      }
    }
  }
}

TEST_CASE("the fused SwiGLU reads non-contiguous inputs", "[swiglu]") {
  auto gen = generator(80);
  const auto both = at::randn({6, 2, 40}, gen);
  const auto gate = both.select(1, 0), up = both.select(1, 1);  // strided views
  at::AutoGradMode enable(true);
  CHECK(test::relative_to_largest(ops::fused_swiglu(gate, up),
                                  ops::swiglu_ref(gate, up).to(at::kDouble)) <
        ops::kSwigluTolerance);
}

TEST_CASE("SwiGLU without a gradient and off the fused path is the composite", "[swiglu]") {
  auto gen = generator(90);
  const auto gate = at::randn({4, 50}, gen), up = at::randn({4, 50}, gen);
  {
    at::NoGradGuard no_grad;
    CHECK(at::equal(ops::swiglu(gate, up), at::silu(gate) * up));
  }
  at::AutoGradMode enable(true);
  const auto g64 = gate.to(at::kDouble), u64 = up.to(at::kDouble);
  CHECK(at::equal(ops::swiglu(g64, u64), at::silu(g64) * u64));
  CHECK_FALSE(ops::fused_swiglu_supported(g64, u64));
  CHECK_THROWS_WITH(ops::fused_swiglu(g64, u64),
                    Catch::Contains("the fused path takes float32 CPU tensors"));
  CHECK_THROWS_WITH(ops::swiglu(gate, at::randn({4, 51}, gen)),
                    Catch::Contains("swiglu: expected gate and up of one shape"));
}
