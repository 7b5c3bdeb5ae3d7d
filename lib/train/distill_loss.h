// Knowledge-distillation losses of qat-kd: the divergence between the teacher's and the student's
// next-token distributions at each scored position, optionally mixed with cross-entropy.
//
// Definitions (P_t teacher, P_s student, both softmax(logits / T) at temperature T):
//   forward KL  KL(P_t || P_s) = sum_v P_t(v) log(P_t(v) / P_s(v))     (default; mode-covering)
//   reverse KL  KL(P_s || P_t) = sum_v P_s(v) log(P_s(v) / P_t(v))     (mode-seeking)
//   generalized JSD with beta in [0, 1], as in GKD (Agarwal et al. 2023, eq. 1) and TRL's
//   GKDTrainer.generalized_jsd_loss:
//     M = beta * P_t + (1 - beta) * P_s
//     JSD_beta = beta * KL(P_t || M) + (1 - beta) * KL(P_s || M)
//   beta = 0.5 is the symmetric Jensen-Shannon divergence. beta points towards the teacher's
//   weight in M. Like TRL, beta == 0 is evaluated as exactly forward KL(P_t || P_s) and beta == 1
//   as exactly reverse KL(P_s || P_t); the formula itself vanishes at both ends, and near them
//   JSD_beta ~= beta * KL(P_t || P_s) (beta -> 0) and ~= (1 - beta) * KL(P_s || P_t) (beta -> 1),
//   i.e. the end points are the limits of JSD_beta / beta and JSD_beta / (1 - beta).
// Temperature: both logits are divided by T and the KD term is multiplied by T^2 (Hinton et al.
// 2015), so its gradient scale does not shrink as 1/T^2. (TRL's generalized_jsd_loss does not
// apply the T^2 factor; at T = 1 the two agree.)
//
// Top-k teacher logits (top_k > 0): only the teacher's k largest logits take part. The teacher is
// renormalized over those k ids; the student's log-probabilities are taken over the FULL vocabulary
// and then gathered at those ids, so the student is not renormalized: its mass outside the
// teacher's top-k is lost and the loss pushes it back into the top-k set. Because the gathered
// student then sums to s <= 1, every KL above is evaluated in its form for non-negative measures,
//   D(p || q) = sum_v [p log(p / q) - p + q],
// which equals KL for two distributions (so top_k = V and top_k = 0 give the same loss), stays
// >= 0 and is 0 only when the student equals the teacher on the top-k ids (s = 1). Without the
// mass terms the reverse KL over a sub-normalized student could go negative by moving mass out of
// the top-k set. For JSD the mass terms cancel exactly, so it is the plain formula.
//
// Precision: the math runs in float32 for float32/bf16/fp16 logits and in float64 for float64
// logits (used by the finite-difference tests). The teacher is detached: it never gets gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "io/enum_names.h"

namespace rqat::train {

enum class DistillDivergence {
  kForwardKl,  // KL(teacher || student), the default
  kReverseKl,  // KL(student || teacher)
  kJsd,        // generalized JSD with jsd_beta (beta weights the teacher in the mixture)
  kCount,      // not a divergence
};
constexpr EnumNames<DistillDivergence> enum_names(DistillDivergence) {
  return {"forward_kl", "reverse_kl", "jsd"};
}

struct DistillOptions {
  DistillDivergence divergence = DistillDivergence::kForwardKl;
  double temperature = 1.0;  // --temperature, > 0
  double jsd_beta = 0.5;     // --jsd-beta, in [0, 1]; only used by kJsd
  int64_t top_k = 0;         // --top-k: 0 = full vocabulary; else 1..V teacher ids (see above)
  double ce_weight = 0.0;    // --ce-weight in [0, 1]: loss = (1 - w) * kd + w * CE(labels)

  // One declaration for qat-kd's flags, its resume fingerprint and its manifest (io/options.h).
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    v.value(self.divergence, "divergence", "forward_kl, reverse_kl or jsd");
    v.value(self.temperature, "temperature", "Distillation temperature");
    v.value(self.jsd_beta, "jsd-beta", "Teacher weight of the JSD mixture");
    v.value(self.top_k, "top-k", "Teacher logits kept per position (0: all)");
    v.value(self.ce_weight, "ce-weight", "Mix of cross-entropy on the data: (1 - w) KD + w CE");
  }
};

struct DistillLoss {
  at::Tensor loss;     // 0-dim: (1 - w) * kd + w * ce (kd alone when w == 0); keeps the graph
  at::Tensor kd;       // 0-dim: T^2 * mean over scored tokens of the divergence
  at::Tensor ce;       // 0-dim: mean cross-entropy of the labels under the student at T = 1;
                       // a constant 0 when ce_weight == 0 (not computed)
  int64_t tokens = 0;  // scored positions; with none, every term is 0 (and still backpropagates)
};

// student_logits, teacher_logits: (B, T, V) logits at the positions that predict the targets (the
// caller aligns them, e.g. logits[:, :-1] for tokens [1..T)); any float dtype, same device.
// mask: (B, T) bool or integer, nonzero at the scored positions; only those rows are read, so the
// logits and labels elsewhere never affect the loss or the gradient. labels: (B, T) int64 target
// ids, required only when ce_weight > 0 (pass an undefined tensor otherwise).
DistillLoss distill_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                         const at::Tensor& mask, const at::Tensor& labels,
                         const DistillOptions& options);

}  // namespace rqat::train
