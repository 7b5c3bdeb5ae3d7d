// See distill_loss.h.
#include "train/distill_loss.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "io/error.h"
#include "ops/forward_kl.h"

namespace rqat::train {

namespace {

void check_options(const DistillOptions& options, int64_t vocab) {
  if (!(options.temperature > 0) || !std::isfinite(options.temperature))
    fail("--temperature must be > 0 and finite, got {}", options.temperature);
  if (!(options.jsd_beta >= 0 && options.jsd_beta <= 1))
    fail("--jsd-beta must be in [0, 1], got {}", options.jsd_beta);
  if (options.top_k < 0 || options.top_k > vocab)
    fail("--top-k must be in [0, {}] (the vocabulary size; 0 = full vocabulary), got {}", vocab,
         options.top_k);
  if (!(options.ce_weight >= 0 && options.ce_weight <= 1))
    fail("--ce-weight must be in [0, 1], got {}", options.ce_weight);
}

void check_inputs(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& mask,
                  const at::Tensor& labels, bool need_labels) {
  if (!student.defined() || student.dim() != 3)
    fail("distill loss: student logits must be (B, T, V), got {} dims",
         student.defined() ? student.dim() : 0);
  if (!teacher.defined() || teacher.sizes() != student.sizes())
    fail("distill loss: teacher logits {} must have the student logits' shape {}",
         teacher.defined() ? c10::str(teacher.sizes()) : "(undefined)", c10::str(student.sizes()));
  if (!at::isFloatingType(student.scalar_type()) || !at::isFloatingType(teacher.scalar_type()))
    fail("distill loss: logits must be floating point, got student {} and teacher {}",
         c10::toString(student.scalar_type()), c10::toString(teacher.scalar_type()));
  if (student.device() != teacher.device())
    fail("distill loss: student logits on {} but teacher logits on {}", student.device().str(),
         teacher.device().str());
  if (student.size(2) == 0) fail("distill loss: the logits have an empty vocabulary");
  const auto rows = student.sizes().slice(0, 2);
  if (!mask.defined() || mask.sizes() != rows)
    fail("distill loss: mask must be (B, T) = {}, got {}", c10::str(rows),
         mask.defined() ? c10::str(mask.sizes()) : "(undefined)");
  if (mask.scalar_type() != at::kBool && !at::isIntegralType(mask.scalar_type(), false))
    fail("distill loss: mask must be bool or integer, got {}", c10::toString(mask.scalar_type()));
  if (need_labels &&
      (!labels.defined() || labels.scalar_type() != at::kLong || labels.sizes() != rows))
    fail("distill loss: labels must be int64 (B, T) = {} when --ce-weight > 0", c10::str(rows));
}

// D(p || q) = sum_v [p log(p / q) - p + q] per row from log-probabilities. The mass terms make it a
// divergence between non-negative measures (see the header); they are skipped where p and q both
// sum to one, where they vanish analytically and would only add rounding.
at::Tensor measure_kl(const at::Tensor& log_p, const at::Tensor& log_q, bool with_mass) {
  const at::Tensor p = log_p.exp();
  at::Tensor terms = p * (log_p - log_q);
  if (with_mass) terms = terms - p + log_q.exp();
  return terms.sum(-1);
}

at::Tensor generalized_jsd(const at::Tensor& teacher_logp, const at::Tensor& student_logp,
                           double beta) {
  // log M = logsumexp(log beta + log P_t, log(1 - beta) + log P_s), stable for peaked rows.
  const at::Tensor log_m = at::logsumexp(
      at::stack({teacher_logp + std::log(beta), student_logp + std::log1p(-beta)}), 0);
  // The mass terms of beta * D(P_t || M) + (1 - beta) * D(P_s || M) sum to
  // -beta |P_t| - (1 - beta) |P_s| + |M| = 0, so plain KL terms are exact even for top-k.
  return beta * measure_kl(teacher_logp, log_m, false) +
         (1 - beta) * measure_kl(student_logp, log_m, false);
}

}  // namespace

DistillLoss distill_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                         const at::Tensor& mask, const at::Tensor& labels,
                         const DistillOptions& options) {
  const bool with_ce = options.ce_weight > 0;
  check_inputs(student_logits, teacher_logits, mask, labels, with_ce);
  const int64_t vocab = student_logits.size(2);
  check_options(options, vocab);

  // Only the scored rows are gathered, so unscored logits (padding, prompt) never enter the math
  // and the (N, V) temporaries cover scored tokens only.
  const at::Tensor rows =
      mask.reshape({-1}).to(at::kBool).nonzero().squeeze(-1).to(student_logits.device());
  DistillLoss out;
  out.tokens = rows.numel();
  const double denominator = static_cast<double>(std::max<int64_t>(out.tokens, 1));

  // bf16/fp16 logits are upcast: log-softmax over a large vocabulary in bf16 loses the tail.
  const bool f64 =
      student_logits.scalar_type() == at::kDouble || teacher_logits.scalar_type() == at::kDouble;
  const at::ScalarType dtype = f64 ? at::kDouble : at::kFloat;
  // Every position scored (the usual batch without padding): the logits themselves, no copies.
  const bool every_row = out.tokens == student_logits.numel() / vocab;
  const auto scored = [&](const at::Tensor& logits) {
    const at::Tensor flat = logits.reshape({-1, vocab});
    return (every_row ? flat : flat.index_select(0, rows)).to(dtype);
  };
  const at::Tensor student = scored(student_logits);
  const at::Tensor teacher = scored(teacher_logits.detach());

  const double t = options.temperature;
  const DistillDivergence divergence = options.divergence;
  const double beta = options.jsd_beta;
  const bool top_k = options.top_k > 0;
  // TRL's end points: beta == 0 is forward KL and beta == 1 reverse KL (JSD_beta itself vanishes).
  const bool forward = divergence == DistillDivergence::kForwardKl ||
                       (divergence == DistillDivergence::kJsd && beta == 0.0);
  const bool reverse = divergence == DistillDivergence::kReverseKl ||
                       (divergence == DistillDivergence::kJsd && beta == 1.0);
  at::Tensor per_token;
  if (forward && !top_k) {
    // The default: one fused call each way where rqat has it (ops/forward_kl.h).
    per_token = ops::forward_kl(student, teacher, t);
  } else {
    const at::Tensor student_scaled = t == 1.0 ? student : student / t;
    const at::Tensor teacher_scaled = t == 1.0 ? teacher : teacher / t;
    at::Tensor student_logp = student_scaled.log_softmax(-1);
    at::Tensor teacher_logp;
    if (top_k) {
      // Student log-probs over the full vocabulary, gathered (not renormalized): see the header.
      const at::Tensor ids = std::get<1>(teacher_scaled.topk(options.top_k, -1));
      teacher_logp = teacher_scaled.gather(-1, ids).log_softmax(-1);
      student_logp = student_logp.gather(-1, ids);
    } else {
      teacher_logp = teacher_scaled.log_softmax(-1);
    }
    if (forward)
      per_token = measure_kl(teacher_logp, student_logp, top_k);
    else if (reverse)
      per_token = measure_kl(student_logp, teacher_logp, top_k);
    else
      per_token = generalized_jsd(teacher_logp, student_logp, beta);
  }
  out.kd = per_token.sum() * (t * t / denominator);

  if (with_ce) {
    const at::Tensor targets =
        labels.reshape({-1}).to(student_logits.device()).index_select(0, rows);
    if (out.tokens > 0) {
      const int64_t low = targets.min().item<int64_t>(), high = targets.max().item<int64_t>();
      if (low < 0 || high >= vocab)
        fail("distill loss: label {} at a scored position is outside the vocabulary of {}",
             low < 0 ? low : high, vocab);
    }
    // Cross-entropy of the data at T = 1: the temperature only softens the teacher match.
    const at::Tensor logp = student.log_softmax(-1);
    out.ce = -logp.gather(-1, targets.unsqueeze(-1)).sum() / denominator;
    out.loss = out.kd * (1 - options.ce_weight) + out.ce * options.ce_weight;
  } else {
    out.ce = at::zeros({}, student.options());
    out.loss = out.kd;
  }
  return out;
}

}  // namespace rqat::train
