// The distillation loss's float32 CPU kernels (ops/forward_kl.h): per row of V logits, with the
// temperature's scaled logits a = student / T and b = teacher / T,
//   forward:   lse_a = log sum_v exp(a_v),  lse_b likewise,  p_v = exp(b_v - lse_b),
//              kl = sum_v p_v ((b_v - lse_b) - (a_v - lse_a))        = KL(softmax b || softmax a)
//   backward:  d kl / d student_v = g (exp(a_v - lse_a) - p_v) / T     (g: the row's gradient)
// Each row is read from memory once per pass over it and stays in cache between its passes (max,
// then sums of exponentials, then the KL terms), where the composite of ATen operators it replaces
// (log_softmax twice, exp, subtraction, multiplication, sum, and their backwards) streams whole
// (rows, V) tensors through memory about fifteen times and keeps three of them alive. The backward
// recomputes the probabilities from the logits and the two log-sum-exps the forward returns. Sums
// run in 16 float lanes, each 1,024 elements of a row added into a double. Rows are split over
// threads and independent, so the results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace rqat::ops {

// student, teacher: rows x vocab; kl, student_lse, teacher_lse: rows (the log-sum-exps of the
// scaled logits, for the backward).
void forward_kl_rows_cpu(const float* student, const float* teacher, int64_t rows, int64_t vocab,
                         float temperature, float* kl, float* student_lse, float* teacher_lse);

// grad_kl: rows; grad_student: rows x vocab.
void forward_kl_backward_cpu(const float* student, const float* teacher, const float* student_lse,
                             const float* teacher_lse, const float* grad_kl, int64_t rows,
                             int64_t vocab, float temperature, float* grad_student);

}  // namespace rqat::ops
