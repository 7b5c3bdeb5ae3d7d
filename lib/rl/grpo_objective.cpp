// See grpo_objective.h.
#include "rl/grpo_objective.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "io/error.h"

namespace rqat::rl {

namespace {

std::string shape_of(const at::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("(undefined)");
}

void check_options(const GrpoLossOptions& options) {
  if (!(options.clip_low >= 0 && options.clip_low <= 1))
    fail("grpo loss: clip_low must be in [0, 1], got {}", options.clip_low);
  if (!(options.clip_high >= 0) || !std::isfinite(options.clip_high))
    fail("grpo loss: clip_high must be >= 0 and finite, got {}", options.clip_high);
  if (!(options.kl_beta >= 0) || !std::isfinite(options.kl_beta))
    fail("grpo loss: kl_beta must be >= 0 and finite, got {}", options.kl_beta);
  if (!(options.tis_cap >= 0) || !std::isfinite(options.tis_cap))
    fail("grpo loss: tis_cap must be >= 0 and finite, got {}", options.tis_cap);
  if (options.aggregation == LossAggregation::kConstantNormalizer &&
      options.max_response_tokens <= 0)
    fail("grpo loss: the constant normalizer (Dr. GRPO) needs max_response_tokens > 0, got {}",
         options.max_response_tokens);
}

void check_logp(const at::Tensor& t, const at::Tensor& like, const char* name) {
  if (!t.defined() || t.sizes() != like.sizes())
    fail("grpo loss: {} must have new_logp's shape {}, got {}", name, shape_of(like), shape_of(t));
  if (!at::isFloatingType(t.scalar_type()))
    fail("grpo loss: {} must be floating point, got {}", name, c10::toString(t.scalar_type()));
  if (t.device() != like.device())
    fail("grpo loss: {} is on {} but new_logp on {}", name, t.device().str(), like.device().str());
}

void check_inputs(const at::Tensor& new_logp, const at::Tensor& old_logp, const at::Tensor& mask,
                  const at::Tensor& advantages, const GrpoLossOptions& options,
                  const at::Tensor& ref_logp, const at::Tensor& rollout_logp) {
  if (!new_logp.defined() || new_logp.dim() != 2)
    fail("grpo loss: new_logp must be (B, T), got {}", shape_of(new_logp));
  if (!at::isFloatingType(new_logp.scalar_type()))
    fail("grpo loss: new_logp must be floating point, got {}",
         c10::toString(new_logp.scalar_type()));
  check_logp(old_logp, new_logp, "old_logp");
  if (!mask.defined() || mask.sizes() != new_logp.sizes())
    fail("grpo loss: mask must have new_logp's shape {}, got {}", shape_of(new_logp),
         shape_of(mask));
  if (mask.is_complex()) fail("grpo loss: mask must be bool, integer or float 0/1");
  if (!advantages.defined() || advantages.dim() != 1 || advantages.size(0) != new_logp.size(0))
    fail("grpo loss: advantages must be (B) = ({}), got {}", new_logp.size(0),
         shape_of(advantages));
  if (!at::isFloatingType(advantages.scalar_type()))
    fail("grpo loss: advantages must be floating point, got {}",
         c10::toString(advantages.scalar_type()));
  if (ref_logp.defined()) check_logp(ref_logp, new_logp, "ref_logp");
  if (rollout_logp.defined()) check_logp(rollout_logp, new_logp, "rollout_logp");
  if (options.kl_beta > 0 && !ref_logp.defined())
    fail("grpo loss: kl_beta = {} needs the reference policy's log-probs (ref_logp)",
         options.kl_beta);
  if (options.tis_cap > 0 && !rollout_logp.defined())
    fail("grpo loss: tis_cap = {} needs the rollout engine's log-probs (rollout_logp)",
         options.tis_cap);
}

double item(const at::Tensor& t) { return t.item<double>(); }

}  // namespace

Advantages group_advantages(const std::vector<double>& rewards, int64_t group_size,
                            AdvantageMode mode, double eps) {
  if (group_size < 1) fail("grpo advantages: group_size must be >= 1, got {}", group_size);
  const auto count = static_cast<int64_t>(rewards.size());
  if (count % group_size != 0)
    fail("grpo advantages: {} rewards are not a whole number of groups of {}", count, group_size);
  if (!(eps >= 0) || !std::isfinite(eps))
    fail("grpo advantages: eps must be >= 0 and finite, got {}", eps);
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(rewards[i]))
      fail("grpo advantages: reward {} (group {}) is not finite: {}", i, i / group_size,
           rewards[i]);

  Advantages out;
  out.values.assign(rewards.size(), 0.0);
  const int64_t groups = count / group_size;
  out.degenerate_group.assign(groups, 0);
  for (int64_t g = 0; g < groups; ++g) {
    const double* r = rewards.data() + g * group_size;
    double* a = out.values.data() + g * group_size;
    // Exact equality, not a tolerance: rewards are usually a few discrete levels, and any real
    // difference is signal the normalization is meant to amplify.
    if (std::all_of(r, r + group_size, [&](double x) { return x == r[0]; })) {
      out.degenerate_group[g] = 1;
      ++out.degenerate_groups;
      continue;  // exactly 0, not the rounding residue of r - mean
    }
    double sum = 0;
    for (int64_t j = 0; j < group_size; ++j) sum += r[j];
    const double mean = sum / static_cast<double>(group_size);
    double scale = 1;
    if (mode == AdvantageMode::kGroupNormalized) {
      double squares = 0;
      for (int64_t j = 0; j < group_size; ++j) squares += (r[j] - mean) * (r[j] - mean);
      // group_size >= 2 here: a group of one is always degenerate.
      scale = std::sqrt(squares / static_cast<double>(group_size - 1)) + eps;
    }
    for (int64_t j = 0; j < group_size; ++j) a[j] = (r[j] - mean) / scale;
  }
  return out;
}

at::Tensor k3_kl(const at::Tensor& logp, const at::Tensor& ref_logp) {
  if (!logp.defined() || !ref_logp.defined() || logp.sizes() != ref_logp.sizes())
    fail("k3 kl: logp {} and ref_logp {} must have the same shape", shape_of(logp),
         shape_of(ref_logp));
  const at::Tensor d = ref_logp.detach() - logp;
  // expm1(d) - d keeps the relative accuracy where exp(d) - d - 1 cancels to rounding noise.
  return torch::expm1(d) - d;
}

GrpoLoss grpo_loss(const at::Tensor& new_logp, const at::Tensor& old_logp, const at::Tensor& mask,
                   const at::Tensor& advantages, const GrpoLossOptions& options,
                   const at::Tensor& ref_logp, const at::Tensor& rollout_logp) {
  check_options(options);
  check_inputs(new_logp, old_logp, mask, advantages, options, ref_logp, rollout_logp);

  const at::ScalarType dtype = new_logp.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Device device = new_logp.device();
  if (at::isFloatingType(mask.scalar_type()) && mask.is_cpu() &&
      !(mask.eq(0) | mask.eq(1)).all().item<bool>())
    fail("grpo loss: a floating-point mask must hold only 0 and 1");
  const at::Tensor on = mask.to(device).ne(0);
  const at::Tensor weight = on.to(dtype);
  const at::Tensor fresh = new_logp.to(dtype);
  const at::Tensor old = old_logp.detach().to(dtype);
  if (advantages.is_cpu() && !torch::isfinite(advantages).all().item<bool>())
    fail("grpo loss: advantages must be finite");
  const at::Tensor adv = advantages.detach().to(device, dtype);

  // Differences are zeroed at masked-out positions with where(), whose backward sends exactly 0
  // there, so junk (NaN, inf) in padding cannot leak into the loss or the gradient.
  const at::Tensor zero = torch::zeros({}, fresh.options());
  const at::Tensor log_ratio = torch::where(on, fresh - old, zero);
  const at::Tensor ratio = log_ratio.exp();
  const at::Tensor a = adv.unsqueeze(1);
  const at::Tensor clipped_ratio =
      ratio.detach().clamp(1.0 - options.clip_low, 1.0 + options.clip_high);
  // min(ratio * A, clip(ratio) * A) picks the clipped term exactly where the ratio left the trust
  // region in the direction the advantage pushes it; there the term is constant (zero gradient).
  const at::Tensor clip_active = on & (((a > 0) & (ratio.detach() > 1.0 + options.clip_high)) |
                                       ((a < 0) & (ratio.detach() < 1.0 - options.clip_low)));
  at::Tensor per_token = -torch::where(clip_active, clipped_ratio * a, ratio * a);

  // Statistics in float64 on the device: a token count is exact, and a sum of float32 terms is
  // widened before it is divided.
  GrpoLoss out;
  const at::Tensor tokens = weight.sum().to(at::kDouble);
  out.tokens = tokens;
  const at::Tensor denominator = tokens.clamp_min(1.0);
  const at::Tensor any = tokens > 0;
  const at::Tensor zero64 = torch::zeros({}, tokens.options());
  out.clip_fraction = torch::where(any, clip_active.sum().to(at::kDouble) / tokens, zero64);
  out.mean_ratio = torch::where(any, (ratio.detach() * weight).sum().to(at::kDouble) / tokens,
                                torch::ones_like(zero64));
  out.kl = zero64;
  // Truncated importance sampling weighs the policy-gradient term only, as verl does: the KL
  // penalty is a regularizer toward the reference, not an estimate the rollout engine biases.
  if (options.tis_cap > 0) {
    const at::Tensor rollout = rollout_logp.detach().to(dtype);
    per_token = per_token * torch::where(on, old - rollout, zero).exp().clamp_max(options.tis_cap);
  }

  if (ref_logp.defined()) {
    const at::Tensor ref = ref_logp.detach().to(dtype);
    const at::Tensor d = torch::where(on, ref - fresh, zero);
    const at::Tensor k3 = torch::expm1(d) - d;
    out.kl = (k3.detach() * weight).sum().to(at::kDouble) / denominator;
    if (options.kl_beta > 0) per_token = per_token + options.kl_beta * k3;
  }
  per_token = torch::where(on, per_token, zero);

  switch (options.aggregation) {
    case LossAggregation::kSequenceMean: {
      const at::Tensor lengths = weight.sum(1);
      const at::Tensor per_sequence = per_token.sum(1) / lengths.clamp_min(1.0);
      out.loss = per_sequence.sum() / (lengths > 0).sum().clamp_min(1).to(per_sequence.dtype());
      break;
    }
    case LossAggregation::kTokenMean:
      out.loss = per_token.sum() / denominator.to(per_token.dtype());
      break;
    case LossAggregation::kConstantNormalizer: {
      const double longest =
          new_logp.size(0) > 0 && weight.is_cpu() ? item(weight.sum(1).max()) : 0.0;
      if (longest > static_cast<double>(options.max_response_tokens))
        fail(
            "grpo loss: a sequence has {} response tokens, more than max_response_tokens = {} "
            "of the constant normalizer",
            longest, options.max_response_tokens);
      const double sequences = static_cast<double>(std::max<int64_t>(new_logp.size(0), 1));
      out.loss = per_token.sum() / (sequences * static_cast<double>(options.max_response_tokens));
      break;
    }
    case LossAggregation::kCount:  // not an aggregation
      fail("grpo loss: no loss aggregation given");
  }
  return out;
}

}  // namespace rqat::rl
