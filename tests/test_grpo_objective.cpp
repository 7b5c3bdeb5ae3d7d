// GRPO objective against closed forms worked out by hand (advantages of small groups, ratio-1
// losses, a batch with clipped tokens), a plain double-precision loop over the per-token formula
// for every aggregation with KL and truncated importance sampling, central finite differences of
// the gradient, the k3 estimator, and the input checks.
#include "rl/grpo_objective.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "test_util.h"

namespace {

using rqat::rl::AdvantageMode;
using rqat::rl::group_advantages;
using rqat::rl::grpo_loss;
using rqat::rl::GrpoLossOptions;
using rqat::rl::LossAggregation;

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

at::Tensor tensor2d(const std::vector<std::vector<double>>& rows) {
  const int64_t b = static_cast<int64_t>(rows.size()), t = static_cast<int64_t>(rows[0].size());
  at::Tensor out = torch::empty({b, t}, kF64);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) out[i][j] = rows[i][j];
  return out;
}

std::vector<double> values_of(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(torch::kDouble).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// A seeded batch over response positions, all (B, T) float64 except adv (B).
struct Batch {
  int64_t b = 0, t = 0;
  at::Tensor new_logp, old_logp, ref_logp, rollout_logp, mask, adv;
};

// log-ratios in [-0.6, 0.6] kept at least 0.02 away from the clip edges log(1 - low) and
// log(1 + high), so finite differences never straddle a kink; one sequence is masked out entirely.
Batch random_batch(uint64_t seed, double low, double high, int64_t b = 4, int64_t t = 6) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0, 1);
  Batch batch;
  batch.b = b;
  batch.t = t;
  std::vector<std::vector<double>> fresh(b, std::vector<double>(t)), old = fresh, ref = fresh,
                                                                     roll = fresh, mask = fresh;
  const double edges[2] = {std::log(1 - low), std::log(1 + high)};
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) {
      old[i][j] = -0.1 - 3 * uni(rng);
      double lr;
      do lr = -0.6 + 1.2 * uni(rng);
      while (std::abs(lr - edges[0]) < 0.02 || std::abs(lr - edges[1]) < 0.02);
      fresh[i][j] = old[i][j] + lr;
      ref[i][j] = old[i][j] + (uni(rng) - 0.5);
      roll[i][j] = old[i][j] + 0.8 * (uni(rng) - 0.5);
      mask[i][j] = (i == 1) ? 0.0 : (uni(rng) < 0.75 || j == 0 ? 1.0 : 0.0);
    }
  batch.new_logp = tensor2d(fresh);
  batch.old_logp = tensor2d(old);
  batch.ref_logp = tensor2d(ref);
  batch.rollout_logp = tensor2d(roll);
  batch.mask = tensor2d(mask).to(torch::kBool);
  batch.adv = torch::empty({b}, kF64);
  for (int64_t i = 0; i < b; ++i) batch.adv[i] = (i % 2 ? -1.0 : 1.0) * (0.3 + uni(rng));
  return batch;
}

struct Reference {
  double loss = 0, clip_fraction = 0, mean_ratio = 1, kl = 0, tokens = 0;
};

// The objective of grpo_objective.h written as plain loops in double.
Reference reference_loss(const Batch& batch, const GrpoLossOptions& o, bool with_ref,
                         bool with_rollout) {
  const auto nl = values_of(batch.new_logp), ol = values_of(batch.old_logp),
             rl = values_of(batch.ref_logp), ro = values_of(batch.rollout_logp),
             m = values_of(batch.mask), a = values_of(batch.adv);
  Reference out;
  double total = 0, sequence_sum = 0, ratio_sum = 0, kl_sum = 0, clipped = 0;
  int sequences = 0;
  for (int64_t i = 0; i < batch.b; ++i) {
    double row = 0;
    int n = 0;
    for (int64_t j = 0; j < batch.t; ++j) {
      const int64_t k = i * batch.t + j;
      if (m[k] == 0) continue;
      const double ratio = std::exp(nl[k] - ol[k]);
      const double clip = std::min(std::max(ratio, 1 - o.clip_low), 1 + o.clip_high);
      const double unclipped_term = ratio * a[i], clipped_term = clip * a[i];
      if (clipped_term < unclipped_term) clipped += 1;
      double l = -std::min(unclipped_term, clipped_term);
      const double d = rl[k] - nl[k];
      const double k3 = std::exp(d) - d - 1;
      if (with_ref) kl_sum += k3;
      // TIS weighs the policy-gradient term only (verl), not the KL penalty.
      if (with_rollout && o.tis_cap > 0) l *= std::min(std::exp(ol[k] - ro[k]), o.tis_cap);
      if (with_ref && o.kl_beta > 0) l += o.kl_beta * k3;
      row += l;
      ratio_sum += ratio;
      ++n;
    }
    total += row;
    if (n > 0) {
      sequence_sum += row / n;
      ++sequences;
    }
    out.tokens += n;
  }
  switch (o.aggregation) {
    case LossAggregation::kSequenceMean:
      out.loss = sequence_sum / std::max(sequences, 1);
      break;
    case LossAggregation::kTokenMean:
      out.loss = total / std::max(out.tokens, 1.0);
      break;
    case LossAggregation::kConstantNormalizer:
      out.loss = total / (static_cast<double>(batch.b) * o.max_response_tokens);
      break;
    case LossAggregation::kCount:  // not an aggregation
      break;
  }
  if (out.tokens > 0) {
    out.clip_fraction = clipped / out.tokens;
    out.mean_ratio = ratio_sum / out.tokens;
    out.kl = kl_sum / out.tokens;
  }
  return out;
}

const LossAggregation kAggregations[] = {LossAggregation::kSequenceMean,
                                         LossAggregation::kTokenMean,
                                         LossAggregation::kConstantNormalizer};

}  // namespace

TEST_CASE("group advantages match hand-computed GRPO and Dr. GRPO values", "[grpo]") {
  // Three groups of four: binary rewards, rewards with a format bonus, and all equal.
  const std::vector<double> rewards = {1, 0, 0, 1, 1.1, 0.1, 0, 0, 0.1, 0.1, 0.1, 0.1};
  const double eps = 1e-6;
  // Group 0: mean 1/2, deviations +-1/2, sample variance (4 * 1/4) / 3 = 1/3.
  const double s0 = std::sqrt(1.0 / 3.0) + eps;
  // Group 1: mean 1.2 / 4 = 0.3, deviations 0.8, -0.2, -0.3, -0.3, squares sum to 0.86.
  const double s1 = std::sqrt(0.86 / 3.0) + eps;
  const std::vector<double> grpo = {0.5 / s0,  -0.5 / s0, -0.5 / s0, 0.5 / s0, 0.8 / s1, -0.2 / s1,
                                    -0.3 / s1, -0.3 / s1, 0,         0,        0,        0};
  const std::vector<double> dr = {0.5, -0.5, -0.5, 0.5, 0.8, -0.2, -0.3, -0.3, 0, 0, 0, 0};

  const auto a = group_advantages(rewards, 4, AdvantageMode::kGroupNormalized, eps);
  const auto d = group_advantages(rewards, 4, AdvantageMode::kMeanCentered, eps);
  REQUIRE(a.values.size() == 12);
  REQUIRE(d.values.size() == 12);
  for (size_t i = 0; i < 12; ++i) {
    INFO("sequence " << i);
    CHECK(a.values[i] == Approx(grpo[i]).margin(1e-12));
    CHECK(d.values[i] == Approx(dr[i]).margin(1e-12));
  }
  // The degenerate group is exactly zero (0.1 * 4 / 4 != 0.1 in binary, so not r - mean).
  for (size_t i = 8; i < 12; ++i) {
    CHECK(a.values[i] == 0.0);
    CHECK(d.values[i] == 0.0);
  }
  CHECK(a.degenerate_group == std::vector<uint8_t>{0, 0, 1});
  CHECK(a.degenerate_groups == 1);
  CHECK(d.degenerate_groups == 1);
  // The sample std, not the population std: with it, group 0 scores 1/2 / sqrt(1/4) = 1.
  CHECK(std::abs(a.values[0] - 1.0) > 0.1);
  // Each non-degenerate GRPO group has mean 0 and sample std (nearly) 1.
  for (int g = 0; g < 2; ++g) {
    double sum = 0, squares = 0;
    for (int j = 0; j < 4; ++j) sum += a.values[g * 4 + j];
    for (int j = 0; j < 4; ++j) squares += a.values[g * 4 + j] * a.values[g * 4 + j];
    CHECK(sum == Approx(0).margin(1e-12));
    CHECK(std::sqrt(squares / 3) == Approx(1).epsilon(1e-5));
  }
}

TEST_CASE("group advantages on random groups match a plain loop", "[grpo]") {
  std::mt19937_64 rng(7);
  std::discrete_distribution<int> level({8, 1, 1});  // mostly 0: some groups all equal
  const int64_t g = 4, groups = 50;
  std::vector<double> rewards(g * groups);
  for (auto& r : rewards) r = 0.55 * level(rng);  // {0, 0.55, 1.1}: some groups degenerate
  for (auto mode : {AdvantageMode::kGroupNormalized, AdvantageMode::kMeanCentered}) {
    const auto a = group_advantages(rewards, g, mode, 1e-4);
    int64_t degenerate = 0;
    for (int64_t k = 0; k < groups; ++k) {
      const double* r = rewards.data() + k * g;
      double mean = 0, var = 0;
      for (int j = 0; j < g; ++j) mean += r[j] / g;
      for (int j = 0; j < g; ++j) var += (r[j] - mean) * (r[j] - mean) / (g - 1);
      const bool same = std::count(r, r + g, r[0]) == g;
      degenerate += same;
      CHECK(a.degenerate_group[k] == same);
      for (int j = 0; j < g; ++j) {
        const double expected = same ? 0.0
                                : mode == AdvantageMode::kMeanCentered
                                    ? r[j] - mean
                                    : (r[j] - mean) / (std::sqrt(var) + 1e-4);
        CHECK(a.values[k * g + j] == Approx(expected).margin(1e-12));
      }
    }
    CHECK(a.degenerate_groups == degenerate);
    CHECK(degenerate > 0);
    CHECK(degenerate < groups);
  }
  // The default epsilon is TRL's, 1e-4.
  CHECK(group_advantages(rewards, g, AdvantageMode::kGroupNormalized).values ==
        group_advantages(rewards, g, AdvantageMode::kGroupNormalized, 1e-4).values);
  // A group of one has no spread: degenerate, advantage 0.
  const auto single = group_advantages({0.0, 1.0, 0.5}, 1, AdvantageMode::kGroupNormalized);
  CHECK(single.values == std::vector<double>{0, 0, 0});
  CHECK(single.degenerate_groups == 3);
}

TEST_CASE("group advantages reject malformed rewards", "[grpo][errors]") {
  using rqat::test::require_error;
  require_error(
      [] {
        group_advantages({1, 0, 1}, 2, AdvantageMode::kGroupNormalized);
      },
      {"3 rewards", "groups of 2"});
  require_error(
      [] {
        group_advantages({1, 0}, 0, AdvantageMode::kGroupNormalized);
      },
      {"group_size"});
  require_error(
      [] {
        group_advantages({1, NAN}, 2, AdvantageMode::kMeanCentered);
      },
      {"reward 1", "not finite"});
  require_error([] { group_advantages({1, 0}, 2, AdvantageMode::kGroupNormalized, -1); }, {"eps"});
}

TEST_CASE("ratio 1 gives minus the advantage-weighted mean for every aggregation", "[grpo]") {
  // Lengths 4, 2 and 0 (masked out), advantages 0.5, -1.5, 2.
  torch::manual_seed(3);
  const at::Tensor logp = -torch::rand({3, 4}, kF64) * 3;
  const at::Tensor mask = tensor2d({{1, 1, 1, 1}, {0, 1, 1, 0}, {0, 0, 0, 0}}).to(torch::kInt);
  const at::Tensor adv = torch::tensor({0.5, -1.5, 2.0}, kF64);
  GrpoLossOptions options;
  options.max_response_tokens = 5;
  // seq_mean: -(0.5 + -1.5) / 2 (the empty sequence is absent); token_mean: -(4 * 0.5 + 2 *
  // -1.5) / 6; constant: -(2 - 3) / (3 sequences * 5).
  const double expected[] = {0.5, 1.0 / 6.0, 1.0 / 15.0};
  for (int k = 0; k < 3; ++k) {
    options.aggregation = kAggregations[k];
    const auto out = grpo_loss(logp, logp, mask, adv, options);
    INFO(rqat::enum_name(options.aggregation));
    CHECK(out.loss.item<double>() == Approx(expected[k]).margin(1e-14));
    CHECK(out.clip_fraction.item<double>() == 0);
    CHECK(out.mean_ratio.item<double>() == 1);
    CHECK(out.kl.item<double>() == 0);
    CHECK(out.tokens.item<double>() == 6);
    // Statistics stay on the device as 0-dim float64 tensors, detached: no host sync inside.
    for (const at::Tensor& stat : {out.clip_fraction, out.mean_ratio, out.kl, out.tokens}) {
      CHECK(stat.dim() == 0);
      CHECK(stat.scalar_type() == at::kDouble);
      CHECK(stat.device() == logp.device());
      CHECK_FALSE(stat.requires_grad());
    }
  }
}

TEST_CASE("clipped tokens: hand-computed loss, clip fraction and exact zero gradients", "[grpo]") {
  // Row 0 has A = +1 and ratios 1.5, 0.5, 1, 1.1; row 1 has A = -1 and ratios 1.5, 0.5, 0.9, 1.
  // With clip 0.2 the clipped term is active at (0, 0) (ratio > 1.2, A > 0) and at (1, 1)
  // (ratio < 0.8, A < 0). Per-token losses -min(rA, clip(r)A):
  //   row 0: -1.2, -0.5, -1, -1.1 (sum -3.8); row 1: 1.5, 0.8, 0.9, 1 (sum 4.2).
  const at::Tensor old = tensor2d({{-1.0, -2.0, -0.5, -3.0}, {-0.7, -1.3, -2.2, -0.1}});
  const at::Tensor log_ratio = tensor2d({{std::log(1.5), std::log(0.5), 0.0, std::log(1.1)},
                                         {std::log(1.5), std::log(0.5), std::log(0.9), 0.0}});
  const at::Tensor fresh = (old + log_ratio).requires_grad_(true);
  const at::Tensor mask = torch::ones({2, 4}, torch::kBool);
  const at::Tensor adv = torch::tensor({1.0, -1.0}, kF64);
  GrpoLossOptions options;
  options.aggregation = LossAggregation::kTokenMean;
  const auto out = grpo_loss(fresh, old, mask, adv, options);
  CHECK(out.loss.item<double>() == Approx(0.4 / 8).margin(1e-14));
  CHECK(out.clip_fraction.item<double>() == 0.25);
  CHECK(out.mean_ratio.item<double>() ==
        Approx((1.5 + 0.5 + 1 + 1.1 + 1.5 + 0.5 + 0.9 + 1) / 8).margin(1e-14));
  out.loss.backward();
  // d/dnew of -r A / 8 is -r A / 8 where unclipped; exactly 0 where the clipped term is active,
  // while ratio 1.5 with A < 0 (outside the range but not clipped by the min) keeps its gradient.
  const at::Tensor expected =
      tensor2d({{0.0, -0.5 / 8, -1.0 / 8, -1.1 / 8}, {1.5 / 8, 0.0, 0.9 / 8, 1.0 / 8}});
  const auto g = values_of(fresh.grad()), e = values_of(expected);
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(e[i]).margin(1e-14));
  CHECK(g[0] == 0.0);
  CHECK(g[5] == 0.0);

  // Seq mean over equal lengths gives the same value; DAPO's clip-higher (0.6) lifts the active
  // token (0, 0) out of the clip: its loss becomes -1.5 and its gradient -1.5 / 8.
  options.aggregation = LossAggregation::kSequenceMean;
  CHECK(grpo_loss(fresh, old, mask, adv, options).loss.item<double>() ==
        Approx((-3.8 / 4 + 4.2 / 4) / 2).margin(1e-14));
  options.aggregation = LossAggregation::kTokenMean;
  options.clip_high = 0.6;
  const at::Tensor fresh2 = (old + log_ratio).requires_grad_(true);
  const auto higher = grpo_loss(fresh2, old, mask, adv, options);
  CHECK(higher.loss.item<double>() == Approx((0.4 - 0.3) / 8).margin(1e-14));
  CHECK(higher.clip_fraction.item<double>() == 0.125);
  higher.loss.backward();
  CHECK(fresh2.grad()[0][0].item<double>() == Approx(-1.5 / 8).margin(1e-14));
}

TEST_CASE("grpo loss matches a plain loop with KL and truncated importance sampling", "[grpo]") {
  for (uint64_t seed : {11u, 12u, 13u}) {
    const Batch batch = random_batch(seed, 0.2, 0.28);
    for (auto aggregation : kAggregations) {
      for (int variant = 0; variant < 4; ++variant) {
        GrpoLossOptions options;
        options.clip_low = 0.2;
        options.clip_high = 0.28;
        options.aggregation = aggregation;
        options.max_response_tokens = 9;
        const bool with_ref = variant >= 1, with_rollout = variant >= 2;
        options.kl_beta = variant == 1 || variant == 3 ? 0.04 : 0.0;
        options.tis_cap = with_rollout ? 1.15 : 0.0;
        const auto out = grpo_loss(batch.new_logp, batch.old_logp, batch.mask, batch.adv, options,
                                   with_ref ? batch.ref_logp : at::Tensor(),
                                   with_rollout ? batch.rollout_logp : at::Tensor());
        const Reference ref = reference_loss(batch, options, with_ref, with_rollout);
        INFO("seed " << seed << " aggregation " << rqat::enum_name(aggregation) << " variant "
                     << variant);
        CHECK(out.loss.item<double>() == Approx(ref.loss).margin(1e-12));
        CHECK(out.clip_fraction.item<double>() == Approx(ref.clip_fraction).margin(1e-15));
        CHECK(out.mean_ratio.item<double>() == Approx(ref.mean_ratio).margin(1e-12));
        CHECK(out.kl.item<double>() == Approx(ref.kl).margin(1e-12));
        CHECK(out.tokens.item<double>() == ref.tokens);
        // The batch exercises both clip sides and a KL that is not tiny.
        CHECK(ref.clip_fraction > 0);
        if (with_ref) CHECK(ref.kl > 0.01);
      }
    }
  }
  // float32 inputs are computed in float32: same values to float32 accuracy.
  const Batch batch = random_batch(21, 0.2, 0.2);
  GrpoLossOptions options;
  options.kl_beta = 0.1;
  const auto f32 =
      grpo_loss(batch.new_logp.to(torch::kFloat), batch.old_logp.to(torch::kFloat), batch.mask,
                batch.adv.to(torch::kFloat), options, batch.ref_logp.to(torch::kFloat));
  CHECK(f32.loss.scalar_type() == torch::kFloat);
  CHECK(f32.loss.item<double>() ==
        Approx(reference_loss(batch, options, true, false).loss).margin(1e-5));
}

TEST_CASE("the gradient matches central finite differences away from the clip kinks", "[grpo]") {
  const Batch batch = random_batch(31, 0.2, 0.28);
  for (auto aggregation : kAggregations) {
    GrpoLossOptions options;
    options.clip_low = 0.2;
    options.clip_high = 0.28;
    options.aggregation = aggregation;
    options.max_response_tokens = 7;
    options.kl_beta = 0.05;
    options.tis_cap = 1.2;
    auto loss_at = [&](const at::Tensor& fresh) {
      return grpo_loss(fresh, batch.old_logp, batch.mask, batch.adv, options, batch.ref_logp,
                       batch.rollout_logp);
    };
    const at::Tensor fresh = batch.new_logp.clone().requires_grad_(true);
    const auto out = loss_at(fresh);
    out.loss.backward();
    const auto grad = values_of(fresh.grad());
    const auto mask = values_of(batch.mask);
    const double h = 1e-6;
    int nonzero = 0;
    for (int64_t k = 0; k < fresh.numel(); ++k) {
      at::Tensor plus = batch.new_logp.clone(), minus = batch.new_logp.clone();
      plus.view({-1})[k] += h;
      minus.view({-1})[k] -= h;
      const double fd =
          (loss_at(plus).loss.item<double>() - loss_at(minus).loss.item<double>()) / (2 * h);
      INFO(rqat::enum_name(aggregation) << " element " << k);
      CHECK(grad[k] == Approx(fd).margin(1e-8));
      if (mask[k] == 0) CHECK(grad[k] == 0.0);
      nonzero += std::abs(grad[k]) > 1e-6;
    }
    CHECK(nonzero > 5);
  }
}

TEST_CASE("masked-out positions may hold junk without effect", "[grpo]") {
  Batch batch = random_batch(41, 0.2, 0.2);
  GrpoLossOptions options;
  options.aggregation = LossAggregation::kTokenMean;
  options.kl_beta = 0.1;
  options.tis_cap = 2;
  const auto clean = grpo_loss(batch.new_logp, batch.old_logp, batch.mask, batch.adv, options,
                               batch.ref_logp, batch.rollout_logp);
  const at::Tensor off = batch.mask.logical_not();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const at::Tensor fresh =
      batch.new_logp.masked_fill(off, std::numeric_limits<double>::infinity()).requires_grad_(true);
  const auto dirty =
      grpo_loss(fresh, batch.old_logp.masked_fill(off, nan), batch.mask, batch.adv, options,
                batch.ref_logp.masked_fill(off, nan), batch.rollout_logp.masked_fill(off, -1e30));
  CHECK(dirty.loss.item<double>() == clean.loss.item<double>());
  CHECK(dirty.kl.item<double>() == clean.kl.item<double>());
  CHECK(dirty.mean_ratio.item<double>() == clean.mean_ratio.item<double>());
  dirty.loss.backward();
  CHECK(torch::isfinite(fresh.grad()).all().item<bool>());
  CHECK(fresh.grad().masked_select(off).abs().max().item<double>() == 0.0);
}

TEST_CASE("truncated importance sampling multiplies each token by the capped ratio", "[grpo]") {
  // new == old (ratio 1), A = 1: the per-token loss is -1 times the weight. Rollout log-probs put
  // exp(old - rollout) at 2 and 0.5; cap 1.2 makes the weights 1.2 and 0.5.
  const at::Tensor old = tensor2d({{-1.0, -2.0}});
  const at::Tensor rollout = old - tensor2d({{std::log(2.0), std::log(0.5)}});
  const at::Tensor mask = torch::ones({1, 2}, torch::kBool);
  const at::Tensor adv = torch::tensor({1.0}, kF64);
  GrpoLossOptions options;
  options.aggregation = LossAggregation::kTokenMean;
  CHECK(grpo_loss(old, old, mask, adv, options).loss.item<double>() == Approx(-1.0));
  options.tis_cap = 1.2;
  CHECK(grpo_loss(old, old, mask, adv, options, {}, rollout).loss.item<double>() ==
        Approx(-(1.2 + 0.5) / 2).margin(1e-14));
  options.tis_cap = 5;  // cap inactive: the plain ratios 2 and 0.5
  CHECK(grpo_loss(old, old, mask, adv, options, {}, rollout).loss.item<double>() ==
        Approx(-(2 + 0.5) / 2).margin(1e-14));
  // With a KL penalty the weight applies to the policy-gradient term only (verl): the reference
  // log-probs put d = ref - new at -log 2 and 0, so k3 = 1/2 + log 2 - 1 and 0.
  options.tis_cap = 1.2;
  options.kl_beta = 0.1;
  const at::Tensor ref = old - tensor2d({{std::log(2.0), 0.0}});
  const double k3 = 0.5 + std::log(2.0) - 1.0;
  CHECK(grpo_loss(old, old, mask, adv, options, ref, rollout).loss.item<double>() ==
        Approx((-1.2 + 0.1 * k3 - 0.5) / 2).margin(1e-14));
}

TEST_CASE("k3 is zero for identical policies and equals exp(d) - d - 1", "[grpo][kl]") {
  torch::manual_seed(5);
  const at::Tensor logp = -torch::rand({3, 7}, kF64) * 4;
  CHECK(rqat::rl::k3_kl(logp, logp).abs().max().item<double>() == 0.0);
  const at::Tensor ref = logp + (torch::rand({3, 7}, kF64) - 0.5) * 6;  // d in [-3, 3]
  const at::Tensor x = logp.clone().requires_grad_(true);
  const at::Tensor k3 = rqat::rl::k3_kl(x, ref);
  const auto got = values_of(k3), l = values_of(logp), r = values_of(ref);
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = r[i] - l[i];
    CHECK(got[i] == Approx(std::exp(d) - d - 1).epsilon(1e-12).margin(1e-15));
    CHECK(got[i] >= 0);
  }
  // d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp); ref gets no gradient.
  k3.sum().backward();
  const auto g = values_of(x.grad());
  for (size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == Approx(1 - std::exp(r[i] - l[i])).margin(1e-12));
  // Tiny differences keep their relative accuracy: k3 ~ d^2 / 2.
  const double tiny = 1e-9;
  const at::Tensor small = rqat::rl::k3_kl(torch::zeros({1}, kF64), torch::full({1}, tiny, kF64));
  CHECK(small.item<double>() == Approx(tiny * tiny / 2).epsilon(1e-6));
}

TEST_CASE("grpo loss rejects bad options and inputs naming the culprit", "[grpo][errors]") {
  using rqat::test::require_error;
  const at::Tensor logp = -torch::rand({2, 3}, kF64);
  const at::Tensor mask = torch::ones({2, 3}, torch::kBool);
  const at::Tensor adv = torch::tensor({1.0, -1.0}, kF64);
  GrpoLossOptions options;
  require_error(
      [&] {
        grpo_loss(logp, logp.view({3, 2}), mask, adv, options);
      },
      {"old_logp", "[2, 3]"});
  require_error([&] { grpo_loss(logp, logp, mask.view({3, 2}), adv, options); }, {"mask"});
  require_error([&] { grpo_loss(logp, logp, mask, torch::ones({3}, kF64), options); },
                {"advantages"});
  require_error([&] { grpo_loss(logp, logp, mask * 0.5, adv, options); }, {"mask", "0 and 1"});
  require_error(
      [&] {
        grpo_loss(logp, logp, mask, torch::tensor({1.0, std::nan("")}, kF64), options);
      },
      {"advantages", "finite"});
  require_error([&] { grpo_loss(logp.view({-1}), logp.view({-1}), mask, adv, options); },
                {"new_logp", "(B, T)"});
  auto with = [&](auto change, std::initializer_list<std::string> needles) {
    GrpoLossOptions o;
    change(o);
    require_error([&] { grpo_loss(logp, logp, mask, adv, o); }, needles);
  };
  with([](GrpoLossOptions& o) { o.clip_low = 1.5; }, {"clip_low"});
  with([](GrpoLossOptions& o) { o.clip_high = -0.1; }, {"clip_high"});
  with([](GrpoLossOptions& o) { o.kl_beta = 0.1; }, {"kl_beta", "ref_logp"});
  with([](GrpoLossOptions& o) { o.tis_cap = 2; }, {"tis_cap", "rollout_logp"});
  with([](GrpoLossOptions& o) { o.aggregation = LossAggregation::kConstantNormalizer; },
       {"max_response_tokens"});
  with(
      [](GrpoLossOptions& o) {
        o.aggregation = LossAggregation::kConstantNormalizer;
        o.max_response_tokens = 2;
      },
      {"3 response tokens", "max_response_tokens = 2"});
  require_error([] { rqat::parse_enum<rqat::rl::AdvantageMode>("ppo", "--advantage"); },
                {"--advantage", "grpo", "dr_grpo", "'ppo'"});
  require_error([] { rqat::parse_enum<rqat::rl::LossAggregation>("mean", "--loss-agg"); },
                {"--loss-agg", "seq_mean", "token_mean", "constant", "'mean'"});
  CHECK(rqat::parse_enum<rqat::rl::AdvantageMode>("dr_grpo", "--a") ==
        AdvantageMode::kMeanCentered);
  for (auto aggregation : kAggregations)
    CHECK(rqat::parse_enum<rqat::rl::LossAggregation>(rqat::enum_name(aggregation), "--x") ==
          aggregation);
  // No masked token at all: loss 0 with a graph.
  const at::Tensor fresh = logp.clone().requires_grad_(true);
  const auto empty = grpo_loss(fresh, logp, torch::zeros({2, 3}, torch::kBool), adv, options);
  CHECK(empty.loss.item<double>() == 0.0);
  CHECK(empty.tokens.item<double>() == 0);
  empty.loss.backward();
  CHECK(fresh.grad().abs().max().item<double>() == 0.0);
}
