// Distillation losses against a plain double-precision reference written with loops over softmax
// probabilities, closed forms (two-class KL, temperature scaling, JSD end points), finite
// differences of the gradient, and the input checks.
#include "train/distill_loss.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using rqat::train::distill_loss;
using rqat::train::DistillDivergence;
using rqat::train::DistillOptions;

struct Batch {
  at::Tensor student, teacher, mask, labels;  // (B, T, V) float64 logits, (B, T) bool, (B, T) int64
};

// Seeded random logits with a spread like a language model's (std 3), a teacher correlated with the
// student, and a mask with unscored positions (never the first one).
Batch random_batch(uint64_t seed, int64_t b = 2, int64_t t = 5, int64_t v = 50) {
  torch::manual_seed(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  Batch batch;
  batch.student = torch::randn({b, t, v}, f64) * 3;
  batch.teacher = batch.student * 0.5 + torch::randn({b, t, v}, f64) * 2;
  batch.mask = torch::rand({b, t}, f64) < 0.7;
  batch.mask.index_put_({0, 0}, true);
  batch.mask.index_put_({b - 1, t - 1}, false);
  batch.labels = torch::randint(0, v, {b, t}, torch::kLong);
  return batch;
}

std::vector<double> row_of(const at::Tensor& logits, int64_t b, int64_t t) {
  const at::Tensor row = logits[b][t].to(torch::kDouble).contiguous();
  return std::vector<double>(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
}

std::vector<double> softmax(const std::vector<double>& logits, double temperature) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t v = 0; v < logits.size(); ++v)
    sum += p[v] = std::exp((logits[v] - top) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// sum p log(p / q) - p + q: KL for distributions, and for the sub-normalized top-k student.
double measure_kl(const std::vector<double>& p, const std::vector<double>& q) {
  double d = 0;
  for (size_t i = 0; i < p.size(); ++i) d += p[i] * std::log(p[i] / q[i]) - p[i] + q[i];
  return d;
}

// T^2 * divergence of one position, straight from the definitions in distill_loss.h.
double reference_kd(const std::vector<double>& student, const std::vector<double>& teacher,
                    const DistillOptions& options) {
  const double temp = options.temperature;
  const std::vector<double> ps_full = softmax(student, temp);
  std::vector<double> pt, ps;
  if (options.top_k > 0) {
    std::vector<size_t> ids(teacher.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](size_t a, size_t b) { return teacher[a] > teacher[b]; });
    ids.resize(options.top_k);
    std::vector<double> top_logits;
    for (size_t id : ids) top_logits.push_back(teacher[id]);
    pt = softmax(top_logits, temp);
    for (size_t id : ids) ps.push_back(ps_full[id]);  // gathered, not renormalized
  } else {
    pt = softmax(teacher, temp);
    ps = ps_full;
  }
  double d = 0;
  const double beta = options.jsd_beta;
  if (options.divergence == DistillDivergence::kForwardKl ||
      (options.divergence == DistillDivergence::kJsd && beta == 0)) {
    d = measure_kl(pt, ps);
  } else if (options.divergence == DistillDivergence::kReverseKl ||
             (options.divergence == DistillDivergence::kJsd && beta == 1)) {
    d = measure_kl(ps, pt);
  } else {
    std::vector<double> m(pt.size());
    for (size_t i = 0; i < m.size(); ++i) m[i] = beta * pt[i] + (1 - beta) * ps[i];
    d = beta * measure_kl(pt, m) + (1 - beta) * measure_kl(ps, m);
  }
  return temp * temp * d;
}

struct Reference {
  double loss = 0, kd = 0, ce = 0;
  int64_t tokens = 0;
};

Reference reference_loss(const Batch& batch, const DistillOptions& options) {
  Reference ref;
  for (int64_t b = 0; b < batch.mask.size(0); ++b) {
    for (int64_t t = 0; t < batch.mask.size(1); ++t) {
      if (!batch.mask[b][t].item<bool>()) continue;
      const std::vector<double> student = row_of(batch.student, b, t);
      ref.kd += reference_kd(student, row_of(batch.teacher, b, t), options);
      ref.ce -= std::log(softmax(student, 1.0)[batch.labels[b][t].item<int64_t>()]);
      ++ref.tokens;
    }
  }
  ref.kd /= static_cast<double>(ref.tokens);
  ref.ce /= static_cast<double>(ref.tokens);
  ref.loss = options.ce_weight > 0 ? (1 - options.ce_weight) * ref.kd + options.ce_weight * ref.ce
                                   : ref.kd;
  return ref;
}

double value(const at::Tensor& scalar) { return scalar.to(torch::kDouble).item<double>(); }

double run(const Batch& batch, const DistillOptions& options) {
  return value(distill_loss(batch.student, batch.teacher, batch.mask, batch.labels, options).loss);
}

DistillOptions options_of(DistillDivergence divergence, double temperature = 1.0, int64_t top_k = 0,
                          double beta = 0.5, double ce_weight = 0.0) {
  DistillOptions options;
  options.divergence = divergence;
  options.temperature = temperature;
  options.top_k = top_k;
  options.jsd_beta = beta;
  options.ce_weight = ce_weight;
  return options;
}

std::vector<DistillOptions> all_configurations() {
  std::vector<DistillOptions> configurations;
  for (const double temperature : {1.0, 2.5})
    for (const int64_t top_k : {int64_t{0}, int64_t{7}}) {
      configurations.push_back(options_of(DistillDivergence::kForwardKl, temperature, top_k));
      configurations.push_back(options_of(DistillDivergence::kReverseKl, temperature, top_k));
      for (const double beta : {0.0, 0.1, 0.5, 0.9, 1.0})
        configurations.push_back(options_of(DistillDivergence::kJsd, temperature, top_k, beta));
    }
  return configurations;
}

std::string describe(const DistillOptions& o) {
  return std::string(rqat::enum_name(o.divergence)) + " T=" + std::to_string(o.temperature) +
         " top_k=" + std::to_string(o.top_k) + " beta=" + std::to_string(o.jsd_beta) +
         " ce_weight=" + std::to_string(o.ce_weight);
}

}  // namespace

TEST_CASE("each divergence equals the double-precision loop reference") {
  const Batch batch = random_batch(11);
  double worst_f64 = 0, worst_f32 = 0;
  for (const DistillOptions& options : all_configurations()) {
    INFO(describe(options));
    const Reference ref = reference_loss(batch, options);
    REQUIRE(ref.kd > 0.01);  // a real divergence, not a vacuous 0 == 0
    const auto out = distill_loss(batch.student, batch.teacher, batch.mask, batch.labels, options);
    CHECK(out.tokens == ref.tokens);
    CHECK(out.loss.dim() == 0);
    CHECK(out.loss.scalar_type() == torch::kDouble);
    const double rel64 = std::abs(value(out.loss) - ref.kd) / ref.kd;
    CHECK(rel64 < 1e-9);
    worst_f64 = std::max(worst_f64, rel64);

    // float32 inputs run in float32; the reference sees the same float32-rounded logits.
    Batch rounded = batch;
    rounded.student = batch.student.to(torch::kFloat);
    rounded.teacher = batch.teacher.to(torch::kFloat);
    const auto out32 =
        distill_loss(rounded.student, rounded.teacher, batch.mask, batch.labels, options);
    CHECK(out32.loss.scalar_type() == torch::kFloat);
    const double ref32 = reference_loss(rounded, options).kd;
    const double rel32 = std::abs(value(out32.loss) - ref32) / ref32;
    CHECK(rel32 < 2e-5);
    worst_f32 = std::max(worst_f32, rel32);
  }
  std::printf("worst relative error vs loop reference: float64 %.3g, float32 %.3g\n", worst_f64,
              worst_f32);
}

TEST_CASE("bf16 logits are upcast and the math runs in float32") {
  const Batch batch = random_batch(12);
  Batch bf16 = batch;
  bf16.student = batch.student.to(torch::kBFloat16);
  bf16.teacher = batch.teacher.to(torch::kBFloat16);
  for (const auto divergence :
       {DistillDivergence::kForwardKl, DistillDivergence::kReverseKl, DistillDivergence::kJsd}) {
    const DistillOptions options = options_of(divergence, 2.0);
    const auto out = distill_loss(bf16.student, bf16.teacher, bf16.mask, bf16.labels, options);
    CHECK(out.loss.scalar_type() == torch::kFloat);
    const double ref = reference_loss(bf16, options).kd;  // on the bf16-rounded values
    CHECK(std::abs(value(out.loss) - ref) / ref < 2e-5);
  }
}

TEST_CASE("identical distributions give zero KL and zero JSD") {
  Batch batch = random_batch(13);
  batch.teacher = batch.student.clone();
  for (const DistillOptions& options :
       {options_of(DistillDivergence::kForwardKl), options_of(DistillDivergence::kReverseKl),
        options_of(DistillDivergence::kJsd, 1.0, 0, 0.5),
        options_of(DistillDivergence::kJsd, 3.0, 0, 0.2)}) {
    INFO(describe(options));
    CHECK(std::abs(run(batch, options)) < 1e-12);
    const at::Tensor s32 = batch.student.to(torch::kFloat);
    CHECK(std::abs(value(distill_loss(s32, s32, batch.mask, batch.labels, options).loss)) < 1e-6);
  }
}

TEST_CASE("forward and reverse KL differ") {
  // A sharper teacher than student, as after pre-training vs quantization: KL is asymmetric there.
  Batch batch = random_batch(14);
  batch.teacher = batch.teacher * 2;
  const double forward = run(batch, options_of(DistillDivergence::kForwardKl));
  const double reverse = run(batch, options_of(DistillDivergence::kReverseKl));
  const double jsd = run(batch, options_of(DistillDivergence::kJsd));
  std::printf("forward KL %.6f  reverse KL %.6f  JSD(0.5) %.6f\n", forward, reverse, jsd);
  CHECK(forward > 0);
  CHECK(reverse > 0);
  CHECK(std::abs(forward - reverse) > 0.05 * std::max(forward, reverse));
  // JSD(0.5) is bounded by log 2 per token, KL is not.
  CHECK(jsd < std::log(2.0));
}

TEST_CASE("temperature: two-class closed form and the T^2 scaling") {
  // One position, V = 2: softmax(x / T) is a sigmoid of the logit gap over T.
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const at::Tensor student = torch::tensor({0.3, -1.1}, f64).view({1, 1, 2});
  const at::Tensor teacher = torch::tensor({2.0, -0.5}, f64).view({1, 1, 2});
  const at::Tensor mask = torch::ones({1, 1}, torch::kBool);
  for (const double temp : {0.5, 1.0, 2.0, 4.0}) {
    const double p = 1 / (1 + std::exp(-(2.0 + 0.5) / temp));  // teacher P(class 0)
    const double q = 1 / (1 + std::exp(-(0.3 + 1.1) / temp));  // student P(class 0)
    const double forward = p * std::log(p / q) + (1 - p) * std::log((1 - p) / (1 - q));
    const double reverse = q * std::log(q / p) + (1 - q) * std::log((1 - q) / (1 - p));
    INFO("T=" << temp);
    CHECK(value(distill_loss(student, teacher, mask, {},
                             options_of(DistillDivergence::kForwardKl, temp))
                    .loss) == Approx(temp * temp * forward).epsilon(1e-12));
    CHECK(value(distill_loss(student, teacher, mask, {},
                             options_of(DistillDivergence::kReverseKl, temp))
                    .loss) == Approx(temp * temp * reverse).epsilon(1e-12));
  }
  // loss(T, logits) = T^2 * loss(1, logits / T) for every divergence and top-k.
  const Batch batch = random_batch(15);
  Batch cooled = batch;
  const double temp = 3.0;
  cooled.student = batch.student / temp;
  cooled.teacher = batch.teacher / temp;
  for (DistillOptions options : all_configurations()) {
    if (options.temperature != 1.0) continue;
    const double at_one = run(cooled, options);
    options.temperature = temp;
    INFO(describe(options));
    CHECK(run(batch, options) == Approx(temp * temp * at_one).epsilon(1e-10));
  }
}

TEST_CASE("generalized JSD: end points are TRL's forward/reverse KL, and their limits") {
  // Milder logits keep the O(beta) remainder of the limit small.
  Batch batch = random_batch(16);
  batch.student = batch.student / 3;
  batch.teacher = batch.teacher / 3;
  const double forward = run(batch, options_of(DistillDivergence::kForwardKl));
  const double reverse = run(batch, options_of(DistillDivergence::kReverseKl));
  CHECK(run(batch, options_of(DistillDivergence::kJsd, 1.0, 0, 0.0)) == forward);
  CHECK(run(batch, options_of(DistillDivergence::kJsd, 1.0, 0, 1.0)) == reverse);
  // JSD_beta ~ beta KL(P_t || P_s) as beta -> 0 and ~ (1 - beta) KL(P_s || P_t) as beta -> 1.
  const double eps = 1e-6;
  const double near_zero = run(batch, options_of(DistillDivergence::kJsd, 1.0, 0, eps)) / eps;
  const double near_one = run(batch, options_of(DistillDivergence::kJsd, 1.0, 0, 1 - eps)) / eps;
  std::printf("JSD(1e-6)/1e-6 %.8f vs forward %.8f; JSD(1-1e-6)/1e-6 %.8f vs reverse %.8f\n",
              near_zero, forward, near_one, reverse);
  CHECK(near_zero == Approx(forward).epsilon(1e-4));
  CHECK(near_one == Approx(reverse).epsilon(1e-4));
  CHECK(std::abs(forward - reverse) > 1e-2 * forward);  // so the two checks are distinguishable
}

TEST_CASE("top-k: k = V equals the full vocabulary; divergences stay non-negative") {
  const Batch batch = random_batch(17);
  const int64_t vocab = batch.student.size(2);
  for (DistillOptions options : all_configurations()) {
    if (options.top_k != 0) continue;
    const double full = run(batch, options);
    options.top_k = vocab;
    INFO(describe(options));
    CHECK(run(batch, options) == Approx(full).epsilon(1e-12));
  }
  for (uint64_t seed = 20; seed < 25; ++seed) {
    const Batch other = random_batch(seed);
    for (const DistillOptions& options : all_configurations()) {
      if (options.top_k == 0) continue;
      INFO(describe(options) << " seed " << seed);
      CHECK(run(other, options) > 0);
    }
  }
}

TEST_CASE("top-k: zero loss when the student is the renormalized teacher on the top-k ids") {
  // Teacher's top-3 are ids 4, 9, 1; the student puts all its mass there in the same ratios.
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  at::Tensor teacher = torch::linspace(-3, 0, 12, f64);
  teacher.index_put_({4}, 5.0);
  teacher.index_put_({9}, 4.0);
  teacher.index_put_({1}, 3.5);
  // -60 leaves e^-40 of mass outside the top-k at T = 1.5: zero to double precision, yet finite.
  at::Tensor student = torch::full({12}, -60.0, f64);
  for (const int64_t id : {4, 9, 1}) student.index_put_({id}, teacher[id] + 0.7);
  const at::Tensor mask = torch::ones({1, 1}, torch::kBool);
  for (const DistillOptions& options : {options_of(DistillDivergence::kForwardKl, 1.5, 3),
                                        options_of(DistillDivergence::kReverseKl, 1.5, 3),
                                        options_of(DistillDivergence::kJsd, 1.5, 3, 0.4)}) {
    INFO(describe(options));
    const double loss = value(
        distill_loss(student.view({1, 1, 12}), teacher.view({1, 1, 12}), mask, {}, options).loss);
    CHECK(std::abs(loss) < 1e-12);
    // The same student over the full vocabulary is far from the teacher.
    DistillOptions full = options;
    full.top_k = 0;
    const double full_loss = value(
        distill_loss(student.view({1, 1, 12}), teacher.view({1, 1, 12}), mask, {}, full).loss);
    CHECK(std::isfinite(full_loss));
    CHECK(full_loss > 1e-2);
  }
}

TEST_CASE("gradients w.r.t. the student match central finite differences") {
  const Batch batch = random_batch(18, 2, 3, 12);
  std::vector<DistillOptions> configurations = {
      options_of(DistillDivergence::kForwardKl),
      options_of(DistillDivergence::kReverseKl, 2.0),
      options_of(DistillDivergence::kJsd, 1.0, 0, 0.3),
      options_of(DistillDivergence::kForwardKl, 1.5, 5, 0.5, 0.25),
      options_of(DistillDivergence::kReverseKl, 1.0, 4),
      options_of(DistillDivergence::kJsd, 0.7, 5, 0.6, 0.5),
  };
  double worst = 0;
  for (const DistillOptions& options : configurations) {
    INFO(describe(options));
    const at::Tensor student = batch.student.clone().requires_grad_(true);
    distill_loss(student, batch.teacher, batch.mask, batch.labels, options).loss.backward();
    const at::Tensor grad = student.grad();
    REQUIRE(grad.defined());
    CHECK(grad.abs().max().item<double>() > 1e-3);
    const double h = 1e-5;
    at::Tensor flat = batch.student.clone().reshape({-1});
    const auto loss_at = [&](const at::Tensor& logits) {
      return value(distill_loss(logits.view(batch.student.sizes()), batch.teacher, batch.mask,
                                batch.labels, options)
                       .loss);
    };
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double x = flat[i].item<double>();
      flat.index_put_({i}, x + h);
      const double up = loss_at(flat);
      flat.index_put_({i}, x - h);
      const double down = loss_at(flat);
      flat.index_put_({i}, x);
      const double fd = (up - down) / (2 * h);
      const double analytic = grad.reshape({-1})[i].item<double>();
      worst = std::max(worst, std::abs(analytic - fd));
      CHECK(std::abs(analytic - fd) < 1e-5 * (1 + std::abs(fd)));
    }
  }
  std::printf("worst |autograd - finite difference| = %.3g\n", worst);
}

TEST_CASE("the teacher receives no gradient") {
  const Batch batch = random_batch(19);
  for (const DistillOptions& options : {options_of(DistillDivergence::kForwardKl, 2.0, 0, 0.5, 0.3),
                                        options_of(DistillDivergence::kReverseKl, 1.0, 6),
                                        options_of(DistillDivergence::kJsd, 1.0, 0, 0.5)}) {
    const at::Tensor student = batch.student.clone().requires_grad_(true);
    const at::Tensor teacher = batch.teacher.clone().requires_grad_(true);
    const auto out = distill_loss(student, teacher, batch.mask, batch.labels, options);
    REQUIRE(out.loss.requires_grad());
    out.loss.backward();
    CHECK(student.grad().defined());
    CHECK_FALSE(teacher.grad().defined());
  }
}

TEST_CASE("ce_weight mixes in the cross-entropy of the labels on scored tokens") {
  const Batch batch = random_batch(21);
  const int64_t vocab = batch.student.size(2);
  // at::cross_entropy_loss over the scored positions: unscored labels set to its ignore index.
  const at::Tensor ignored =
      torch::where(batch.mask, batch.labels, torch::full_like(batch.labels, -100));
  const double expected_ce = value(at::cross_entropy_loss(
      batch.student.reshape({-1, vocab}), ignored.reshape({-1}), {}, at::Reduction::Mean, -100));
  for (const double weight : {0.3, 1.0}) {
    const DistillOptions options = options_of(DistillDivergence::kJsd, 2.0, 0, 0.5, weight);
    const auto out = distill_loss(batch.student, batch.teacher, batch.mask, batch.labels, options);
    const Reference ref = reference_loss(batch, options);
    INFO("ce_weight " << weight);
    CHECK(value(out.ce) == Approx(expected_ce).epsilon(1e-12));
    CHECK(ref.ce == Approx(expected_ce).epsilon(1e-12));
    CHECK(value(out.kd) == Approx(ref.kd).epsilon(1e-12));
    CHECK(value(out.loss) ==
          Approx((1 - weight) * value(out.kd) + weight * expected_ce).epsilon(1e-12));
  }
  // Without a CE weight the labels are not needed and ce is 0.
  const auto kd_only = distill_loss(batch.student, batch.teacher, batch.mask, at::Tensor(),
                                    options_of(DistillDivergence::kForwardKl));
  CHECK(value(kd_only.ce) == 0.0);
  CHECK(value(kd_only.loss) == value(kd_only.kd));
}

TEST_CASE("unscored positions do not affect the loss or the gradient") {
  const Batch batch = random_batch(22);
  Batch garbage = batch;
  const at::Tensor unscored = batch.mask.logical_not().unsqueeze(-1);
  garbage.student = torch::where(unscored, torch::randn_like(batch.student) * 100, batch.student);
  garbage.teacher = torch::where(unscored, torch::randn_like(batch.teacher) * 100, batch.teacher);
  garbage.labels = torch::where(batch.mask, batch.labels, torch::full_like(batch.labels, 7));
  REQUIRE(!torch::equal(garbage.student, batch.student));
  for (const DistillOptions& options : all_configurations()) {
    DistillOptions with_ce = options;
    with_ce.ce_weight = 0.2;
    INFO(describe(with_ce));
    CHECK(run(batch, with_ce) == run(garbage, with_ce));
  }
  const at::Tensor student = garbage.student.clone().requires_grad_(true);
  distill_loss(student, garbage.teacher, garbage.mask, garbage.labels,
               options_of(DistillDivergence::kJsd, 2.0, 5, 0.5, 0.3))
      .loss.backward();
  CHECK(student.grad().masked_select(unscored.expand_as(student)).abs().max().item<double>() == 0);
  // An integer mask is the same as a bool one; an empty mask gives 0 and still backpropagates.
  CHECK(run(Batch{batch.student, batch.teacher, batch.mask.to(torch::kUInt8), batch.labels},
            options_of(DistillDivergence::kForwardKl)) ==
        run(batch, options_of(DistillDivergence::kForwardKl)));
  const at::Tensor none = torch::zeros_like(batch.mask);
  const at::Tensor s = batch.student.clone().requires_grad_(true);
  const auto empty = distill_loss(s, batch.teacher, none, batch.labels,
                                  options_of(DistillDivergence::kReverseKl, 1.0, 3, 0.5, 0.5));
  CHECK(empty.tokens == 0);
  CHECK(value(empty.loss) == 0.0);
  empty.loss.backward();
  CHECK(s.grad().abs().max().item<double>() == 0);
}

TEST_CASE("bad options and inputs fail naming the option") {
  using rqat::test::require_error;
  const Batch batch = random_batch(23, 2, 3, 10);
  const auto call = [&](const DistillOptions& options) {
    return [&batch, options] {
      distill_loss(batch.student, batch.teacher, batch.mask, batch.labels, options);
    };
  };
  DistillOptions o;
  o.temperature = 0;
  require_error(call(o), {"--temperature", "> 0"});
  o.temperature = -1;
  require_error(call(o), {"--temperature"});
  o = {};
  o.jsd_beta = 1.5;
  require_error(call(o), {"--jsd-beta", "[0, 1]"});
  o = {};
  o.top_k = 11;
  require_error(call(o), {"--top-k", "10"});
  o.top_k = -1;
  require_error(call(o), {"--top-k"});
  o = {};
  o.ce_weight = 1.5;
  require_error(call(o), {"--ce-weight"});
  require_error([] { rqat::parse_enum<rqat::train::DistillDivergence>("kl", "--divergence"); },
                {"--divergence", "forward_kl", "reverse_kl", "jsd", "'kl'"});
  CHECK(rqat::parse_enum<rqat::train::DistillDivergence>("reverse_kl", "--divergence") ==
        DistillDivergence::kReverseKl);
  CHECK(rqat::parse_enum<rqat::train::DistillDivergence>("jsd", "--divergence") ==
        DistillDivergence::kJsd);

  require_error(
      [&] { distill_loss(batch.student, batch.teacher.slice(2, 0, 9), batch.mask, {}, {}); },
      {"teacher logits", "shape"});
  require_error([&] { distill_loss(batch.student[0], batch.teacher[0], batch.mask, {}, {}); },
                {"student logits", "(B, T, V)"});
  require_error([&] { distill_loss(batch.student, batch.teacher, batch.mask[0], {}, {}); },
                {"mask", "(B, T)"});
  require_error(
      [&] { distill_loss(batch.student, batch.teacher, batch.mask.to(torch::kFloat), {}, {}); },
      {"mask", "bool or integer"});
  DistillOptions ce;
  ce.ce_weight = 0.5;
  require_error([&] { distill_loss(batch.student, batch.teacher, batch.mask, {}, ce); },
                {"labels", "--ce-weight"});
  const at::Tensor bad_labels =
      torch::where(batch.mask, torch::full_like(batch.labels, 10), batch.labels);
  require_error([&] { distill_loss(batch.student, batch.teacher, batch.mask, bad_labels, ce); },
                {"label 10", "vocabulary of 10"});
  // An out-of-range label at an unscored position is never read.
  const at::Tensor unscored_bad =
      torch::where(batch.mask, batch.labels, torch::full_like(batch.labels, 99));
  CHECK_NOTHROW(distill_loss(batch.student, batch.teacher, batch.mask, unscored_bad, ce));
}
