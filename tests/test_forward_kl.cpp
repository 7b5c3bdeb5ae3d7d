// The fused distillation divergence (ops/forward_kl.h) against the closed form computed
// independently in float64 (softmax, then sum p log(p / q), and the gradient (q - p) / T times
// the row's gradient), on awkward shapes: a vocabulary of one, rows ending inside a vector, a
// vocabulary past one summation chunk, temperatures, equal rows, peaked rows. The measures are
// forward_kl.h's (the KL relative to the size of its terms, the gradient relative to its largest
// entry). The results do not depend on the thread count, and the dispatcher takes the twin where
// the fused path does not apply.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/forward_kl.h"
#include "ops/kernel_choice.h"
#include "test_util.h"

using namespace rqat;

namespace {

struct Case {
  int64_t rows, vocab;
  double magnitude, temperature;
};

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// The closed form in float64: KL per row and its gradient for row weights g.
std::pair<at::Tensor, at::Tensor> closed_form(const at::Tensor& s, const at::Tensor& t, double temp,
                                              const at::Tensor& g) {
  const auto p = at::softmax(t.to(at::kDouble) / temp, -1);
  const auto q = at::softmax(s.to(at::kDouble) / temp, -1);
  const auto kl = (p * (p.log() - q.log())).sum(-1);
  const auto grad = (q - p) / temp * g.to(at::kDouble).unsqueeze(-1);
  return {kl, grad};
}

}  // namespace

TEST_CASE("the fused forward KL computes the closed form and its gradient", "[forward_kl]") {
  const std::vector<Case> cases = {
      {3, 1, 1, 1},    {5, 15, 2, 1},   {4, 17, 2, 0.5},    {2, 1029, 3, 1},
      {3, 2048, 1, 2}, {6, 300, 30, 1}, {1, 40000, 4, 1.5},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO(c.rows << " rows x " << c.vocab << ", magnitude " << c.magnitude << ", T "
                << c.temperature);
    auto gen = generator(40 + i);
    auto student = at::randn({c.rows, c.vocab}, gen) * c.magnitude;
    const auto teacher = at::randn({c.rows, c.vocab}, gen) * c.magnitude;
    if (c.rows > 2) student[1].copy_(teacher[1]);  // an equal row: KL 0, gradient 0
    const auto g = at::rand({c.rows}, gen) + 0.5;
    student.requires_grad_();
    at::AutoGradMode enable(true);
    const auto kl = ops::fused_forward_kl(student, teacher, c.temperature);
    const auto grad = torch::autograd::grad({kl}, {student}, {g})[0];
    const auto [want_kl, want_grad] = closed_form(student.detach(), teacher, c.temperature, g);
    const auto scale = ops::forward_kl_error_scale(student.detach(), teacher, c.temperature);
    CHECK(((kl.to(at::kDouble) - want_kl).abs() / scale).max().item<double>() <
          ops::kForwardKlTolerance);
    CHECK(((grad.to(at::kDouble) - want_grad).abs().max() / want_grad.abs().max().clamp_min(1e-30))
              .item<double>() < ops::kForwardKlTolerance);
    if (c.rows > 2) {
      CHECK(std::abs(kl[1].item<double>()) < 1e-6);
      CHECK(grad[1].abs().max().item<double>() < 1e-7);
    }
    CHECK((kl >= -1e-6).all().item<bool>());
  }
}

TEST_CASE("the fused forward KL gives the same bits on 1 and 2 threads", "[forward_kl]") {
  auto gen = generator(50);
  auto student = at::randn({33, 2100}, gen).requires_grad_();
  const auto teacher = at::randn({33, 2100}, gen);
  const int threads = at::get_num_threads();
  std::vector<at::Tensor> results;
  for (int n : {1, 2}) {
    at::set_num_threads(n);
    at::AutoGradMode enable(true);
    const auto kl = ops::fused_forward_kl(student, teacher, 1.0);
    const auto grad = torch::autograd::grad({kl.sum()}, {student})[0];
    results.push_back(at::cat({kl.detach(), grad.reshape(-1)}));
  }
  at::set_num_threads(threads);
  CHECK(at::equal(results[0], results[1]));
}

TEST_CASE("forward_kl takes the twin where the fused path does not apply", "[forward_kl]") {
  auto gen = generator(60);
  const auto student = at::randn({4, 50}, gen, at::kDouble);
  auto teacher = at::randn({4, 50}, gen, at::kDouble);
  // float64: the twin, exactly.
  CHECK(at::equal(ops::forward_kl(student, teacher, 1.0),
                  ops::forward_kl_ref(student, teacher, 1.0)));
  // A teacher that wants a gradient is not the fused path's to take.
  const auto s32 = student.to(at::kFloat), t32 = teacher.to(at::kFloat).requires_grad_();
  CHECK_FALSE(ops::fused_forward_kl_supported(s32, t32));
  CHECK_THROWS_WITH(ops::fused_forward_kl(s32, t32, 1.0),
                    Catch::Contains("teacher without gradient"));
  CHECK_THROWS_WITH(ops::forward_kl(s32, at::randn({4, 51}), 1.0),
                    Catch::Contains("one (rows, V) shape"));
  CHECK_THROWS_WITH(ops::forward_kl(s32, s32, 0.0), Catch::Contains("temperature must be > 0"));
}
