#include "train/student_loss.h"

#include <torch/torch.h>

#include "train/token_nll.h"

namespace rqat::train {

MicroBatchLossFn student_loss(model::CausalLM& student, model::CausalLM* teacher,
                              const DistillOptions& distill) {
  return [&student, teacher, distill](const data::TokenBatch& batch, double step_targets) {
    MicroBatchLoss result;
    const at::Tensor logits = student.forward(batch.input_ids, batch.attention_mask);
    if (!teacher) {
      const MaskedNllSum nll = masked_next_token_nll(logits, batch.input_ids, batch.loss_mask);
      result.loss = nll.sum / step_targets;
      result.sums["ce"] = nll.sum.item<double>();
      return result;
    }
    at::Tensor teacher_logits;
    {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher->forward(batch.input_ids, batch.attention_mask);
    }
    // Logits at positions 0..T-2 predict tokens 1..T-1: the targets' mask and labels shift by one.
    const int64_t t = batch.input_ids.size(1);
    const DistillLoss d =
        distill_loss(logits.slice(1, 0, t - 1), teacher_logits.slice(1, 0, t - 1),
                     batch.loss_mask.slice(1, 1, t), batch.input_ids.slice(1, 1, t), distill);
    const double tokens = static_cast<double>(d.tokens);
    result.loss = d.loss * (tokens / step_targets);
    result.sums["kd"] = d.kd.item<double>() * tokens;
    if (distill.ce_weight > 0) result.sums["ce"] = d.ce.item<double>() * tokens;
    return result;
  };
}

}  // namespace rqat::train
