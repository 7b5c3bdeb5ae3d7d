// The loss of a qat-sft / qat-kd micro-batch, for the Trainer (train/trainer.h): the student's
// cross-entropy on the target tokens (sft), or its divergence from a frozen teacher run on the same
// batch (kd, train/distill_loss.h). Either is a SUM over the micro-batch's target tokens divided by
// the step's target tokens, as MicroBatchLossFn requires; the sums "ce" and "kd" are reported.
#pragma once

#include "model/decoder.h"
#include "train/distill_loss.h"
#include "train/trainer.h"

namespace rqat::train {

// `teacher` null: sft. The models outlive the returned function.
MicroBatchLossFn student_loss(model::CausalLM& student, model::CausalLM* teacher,
                              const DistillOptions& distill);

}  // namespace rqat::train
