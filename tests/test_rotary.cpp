// The fused rotary embedding (ops/rotary.h): the composite's values bit for bit, forward and
// backward, on awkward shapes (D 2, odd heads and positions, angles shared by the batch, x in the
// projection's order and fully contiguous, a strided last dimension, an expanded x), and the
// rotation's closed form computed independently in float64 (a rotation of each pair (x[i],
// x[i + D/2]) by its angle, the gradient by minus the angle). Its output is (B, heads, T, D)
// contiguous and its dx has x's strides; the same bits on 1 and 2 threads; the dispatcher's
// composite where the fused path does not apply; one-line errors for bad shapes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/rotary.h"
#include "test_util.h"

using namespace rqat;

namespace {

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// How x reaches the kernel.
enum class Layout { kProjection, kContiguous, kStridedLast, kExpandedHeads };

at::Tensor make_x(Layout layout, int64_t b, int64_t h, int64_t t, int64_t d, at::Generator& gen) {
  switch (layout) {
    case Layout::kProjection:  // (B, T, heads, D) seen as (B, heads, T, D), as the model passes q
      return at::randn({b, t, h, d}, gen).transpose(1, 2);
    case Layout::kContiguous:
      return at::randn({b, h, t, d}, gen);
    case Layout::kStridedLast:  // every other value of a wider row
      return at::randn({b, h, t, 2 * d}, gen).slice(-1, 0, 2 * d, 2);
    case Layout::kExpandedHeads:  // one head's values repeated: overlapping memory
      return at::randn({b, 1, t, d}, gen).expand({b, h, t, d});
  }
  return {};
}

struct Shape {
  int64_t batch, heads, steps, dim;
};

// (cos, signed_sin) of random angles per position (and per sequence unless shared), and the
// angles themselves (B or 1, T, D/2) in float64 for the closed form.
struct Angles {
  at::Tensor cos, sin, theta;
};

Angles make_angles(const Shape& s, bool shared, at::Generator& gen) {
  const auto theta = at::rand({shared ? 1 : s.batch, s.steps, s.dim / 2}, gen) * 20 - 10;
  const auto c = theta.cos(), sn = theta.sin();
  return {at::cat({c, c}, -1), at::cat({-sn, sn}, -1), theta.to(at::kDouble)};
}

// Each pair (a, b) = (x[i], x[i + D/2]) rotated by theta[i]: (a cos - b sin, a sin + b cos).
at::Tensor rotated(const at::Tensor& x, const at::Tensor& theta) {
  const int64_t half = x.size(-1) / 2;
  const auto a = x.narrow(-1, 0, half).to(at::kDouble),
             b = x.narrow(-1, half, half).to(at::kDouble);
  const auto c = theta.cos().unsqueeze(1), s = theta.sin().unsqueeze(1);
  return at::cat({a * c - b * s, a * s + b * c}, -1);
}

}  // namespace

TEST_CASE("the fused rotary embedding is the composite bit for bit, and the rotation", "[rotary]") {
  const std::vector<Shape> shapes = {{1, 1, 1, 2}, {2, 3, 7, 10}, {3, 5, 9, 64}, {1, 2, 33, 128}};
  const std::vector<Layout> layouts = {Layout::kProjection, Layout::kContiguous,
                                       Layout::kStridedLast, Layout::kExpandedHeads};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    for (const auto layout : layouts) {
      for (const bool shared : {false, true}) {
        INFO("x (" << s.batch << ", " << s.heads << ", " << s.steps << ", " << s.dim << "), layout "
                   << static_cast<int>(layout) << (shared ? ", shared angles" : ""));
        auto gen = generator(seed++);
        auto x = make_x(layout, s.batch, s.heads, s.steps, s.dim, gen).requires_grad_();
        const auto angles = make_angles(s, shared, gen);
        const auto dout = at::randn({s.batch, s.heads, s.steps, s.dim}, gen);
        at::AutoGradMode enable(true);
        const auto out = ops::fused_rotary(x, angles.cos, angles.sin);
        const auto ref = ops::rotary_ref(x, angles.cos, angles.sin);
        CHECK(out.is_contiguous());
        CHECK(test::same_bits(out, ref));
        const auto dx = torch::autograd::grad({out}, {x}, {dout})[0];
        const auto dx_ref = torch::autograd::grad({ref}, {x}, {dout})[0];
        CHECK(test::same_bits(dx, dx_ref));
        // Independently: float32 products and a sum against the exact rotation, a few ulps of the
        // largest entry (the angles' cos and sin are float32 roundings too).
        CHECK(test::relative_to_largest(out, rotated(x.detach(), angles.theta)) < 1e-6);
        CHECK(test::relative_to_largest(dx, rotated(dout, -angles.theta)) < 1e-6);
        if (layout == Layout::kProjection) CHECK(dx.strides() == x.strides());
      }
    }
  }
}

TEST_CASE("the fused rotary embedding gives the same bits on 1 and 2 threads", "[rotary]") {
  auto gen = generator(200);
  const Shape s{2, 4, 65, 32};
  auto x = make_x(Layout::kProjection, s.batch, s.heads, s.steps, s.dim, gen).requires_grad_();
  const auto angles = make_angles(s, false, gen);
  const auto dout = at::randn({s.batch, s.heads, s.steps, s.dim}, gen);
  const auto run = [&](int threads) {
    at::set_num_threads(threads);
    at::AutoGradMode enable(true);
    const auto out = ops::fused_rotary(x, angles.cos, angles.sin);
    return std::pair{out.detach(), torch::autograd::grad({out}, {x}, {dout})[0]};
  };
  const int threads_before = at::get_num_threads();
  const auto one = run(1), two = run(2);
  at::set_num_threads(threads_before);
  CHECK(test::same_bits(one.first, two.first));
  CHECK(test::same_bits(one.second, two.second));
}

TEST_CASE("rotary without a gradient is the same; off the fused path, the composite", "[rotary]") {
  auto gen = generator(300);
  const Shape s{2, 3, 5, 8};
  const auto x = make_x(Layout::kProjection, s.batch, s.heads, s.steps, s.dim, gen);
  const auto angles = make_angles(s, false, gen);
  const auto ref = ops::rotary_ref(x, angles.cos, angles.sin);
  {
    at::NoGradGuard no_grad;
    CHECK(test::same_bits(ops::fused_rotary(x, angles.cos, angles.sin), ref));
  }
  {
    c10::InferenceMode inference;
    CHECK(test::same_bits(ops::fused_rotary(x, angles.cos, angles.sin), ref));
  }
  // float64 and angles with a gradient take the composite, which differentiates the angles too.
  const auto x64 = x.to(at::kDouble), cos64 = angles.cos.to(at::kDouble);
  const auto sin64 = angles.sin.to(at::kDouble);
  CHECK_FALSE(ops::fused_rotary_supported(x64, cos64, sin64));
  CHECK(at::equal(ops::rotary(x64, cos64, sin64), ops::rotary_ref(x64, cos64, sin64)));
  CHECK_THROWS_WITH(ops::fused_rotary(x64, cos64, sin64),
                    Catch::Contains("the fused path takes float32 CPU tensors"));
  at::AutoGradMode enable(true);
  const auto cos = angles.cos.clone().requires_grad_();
  CHECK_FALSE(ops::fused_rotary_supported(x, cos, angles.sin));
  const auto out = ops::rotary(x, cos, angles.sin);
  CHECK(test::same_bits(out, ref));
  CHECK(torch::autograd::grad({out.sum()}, {cos})[0].defined());
}

TEST_CASE("rotary names the shapes it cannot take", "[rotary]") {
  auto gen = generator(400);
  const auto x = at::randn({2, 3, 5, 8}, gen), cos = at::randn({2, 5, 8}, gen);
  const char* message = "rotary: expected x (B, heads, T, D) with D even";
  CHECK_THROWS_WITH(ops::rotary(at::randn({2, 3, 5, 7}, gen), at::randn({2, 5, 7}, gen),
                                at::randn({2, 5, 7}, gen)),
                    Catch::Contains(message));
  CHECK_THROWS_WITH(ops::rotary(x, at::randn({3, 5, 8}, gen), at::randn({3, 5, 8}, gen)),
                    Catch::Contains(message));
  CHECK_THROWS_WITH(ops::rotary(x, cos, at::randn({2, 4, 8}, gen)), Catch::Contains(message));
  CHECK_THROWS_WITH(ops::rotary(x.flatten(0, 1), cos, cos), Catch::Contains(message));
}
