// The first-use self-check of the fused rotary embedding (ops/kernel_self_checks.h): its output
// and the gradient of x against rotary_ref in float32 from the same inputs, bit for bit. Cases:
// one position of one head at the smallest width (D = 2), x in the projection's (B, T, heads, D)
// order seen as (B, heads, T, D) as the model passes it, angles shared by the batch, and a
// contiguous x with an odd number of positions at a wide head.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/kernel_self_checks.h"
#include "ops/rotary.h"

namespace rqat::ops {

namespace {

struct RotaryCase {
  const char* name;
  int64_t batch, heads, steps, dim;
  bool projection_order;  // x made (B, T, heads, D) and transposed, as the model's q and k
  bool shared_angles;     // cos and sin (1, T, D)
};

}  // namespace

KernelCheck check_rotary(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const std::vector<RotaryCase> rotary_cases = {
      {"one position of one head, D 2", 1, 1, 1, 2, false, false},
      {"the projection's order, 3 heads of 10", 2, 3, 7, 10, true, false},
      {"angles shared by the batch", 3, 2, 5, 8, true, true},
      {"a contiguous x, 9 positions of 128", 1, 2, 9, 128, false, false},
  };
  uint64_t seed = 0x5eed0009;
  for (const auto& c : rotary_cases) {
    cases.run(c.name, [&] {
      at::AutoGradMode grad_mode(true);
      auto x = c.projection_order
                   ? check_randn({c.batch, c.steps, c.heads, c.dim}, seed++, device).transpose(1, 2)
                   : check_randn({c.batch, c.heads, c.steps, c.dim}, seed++, device);
      x.requires_grad_();
      const int64_t angle_batch = c.shared_angles ? 1 : c.batch;
      const auto angles = check_randn({angle_batch, c.steps, c.dim}, seed++, device) * 3;
      const auto cos = angles.cos(), sin = angles.sin();
      const auto out = fused_rotary(x, cos, sin);
      const auto ref = rotary_ref(x, cos, sin);
      cases.compare_exact(out, ref);
      const auto grad = check_randn({c.batch, c.heads, c.steps, c.dim}, seed++, device);
      cases.compare_exact(torch::autograd::grad({out}, {x}, {grad})[0],
                          torch::autograd::grad({ref}, {x}, {grad})[0]);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
