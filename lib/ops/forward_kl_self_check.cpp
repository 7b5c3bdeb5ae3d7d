// The first-use self-check of the fused distillation divergence (ops/kernel_self_checks.h): the
// KL per row and the student's gradient against forward_kl_ref in float64 from the same inputs,
// in the measures of forward_kl.h (the KL relative to the size of its terms, the gradient
// relative to its largest entry), within kForwardKlTolerance. Cases: a vocabulary of one, short
// rows that end inside a vector, a row where student and teacher agree (KL 0), a temperature,
// peaked rows of large logits, and a Qwen-sized vocabulary.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/forward_kl.h"
#include "ops/kernel_self_checks.h"

namespace rqat::ops {

namespace {

struct ForwardKlCase {
  const char* name;
  int64_t rows, vocab;
  double magnitude, temperature;
  bool same_row;  // row 0 of the student equals the teacher's
};

}  // namespace

KernelCheck check_forward_kl(const c10::Device& device) {
  SelfCheckScope scope;
  SelfCheckCases cases;
  const std::vector<ForwardKlCase> kl_cases = {
      {"a vocabulary of one", 3, 1, 1, 1, false},
      {"rows ending inside a vector", 5, 37, 2, 1, true},
      {"temperature 2", 4, 100, 3, 2, false},
      {"peaked rows, large logits", 3, 64, 40, 1, false},
      {"a Qwen-sized vocabulary", 2, 151936, 4, 1, false},
  };
  uint64_t seed = 0x5eed0007;
  for (const auto& c : kl_cases) {
    cases.run(c.name, [&] {
      at::AutoGradMode grad_mode(true);
      auto student = check_randn({c.rows, c.vocab}, seed++, device) * c.magnitude;
      const auto teacher = check_randn({c.rows, c.vocab}, seed++, device) * c.magnitude;
      if (c.same_row) student[0].copy_(teacher[0]);
      auto student64 = student.to(at::kDouble).requires_grad_();
      student.requires_grad_();
      const auto kl = fused_forward_kl(student, teacher, c.temperature);
      const auto ref = forward_kl_ref(student64, teacher.to(at::kDouble), c.temperature);
      cases.compare(kl, ref, forward_kl_error_scale(student, teacher, c.temperature),
                    kForwardKlTolerance);
      const auto grad_kl = check_randn({c.rows}, seed++, device);
      const auto grad = torch::autograd::grad({kl}, {student}, {grad_kl})[0];
      const auto grad_ref = torch::autograd::grad({ref}, {student64}, {grad_kl.to(at::kDouble)})[0];
      cases.compare(grad, grad_ref, grad_ref.abs().max().clamp_min(1e-30), kForwardKlTolerance);
    });
  }
  return cases.finish();
}

}  // namespace rqat::ops
