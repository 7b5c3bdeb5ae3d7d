// Fused kernels of the fake-quantized weight with frozen scales and zeros, the hot path of QAT
// (see quant/fake_quant_linear.h for the maths). Per element, with (s, z) taken from row r and
// group g_idx[c] of column c, in float32 with IEEE division and round half to even:
//   code = round(w / s) + z,  w_q = (clamp(code, 0, max_code) - z) * s            (forward)
//   grad_w = grad_wq where 0 <= code <= max_code, else 0                           (backward)
// The composite of ATen ops that computes the same (two gathers, a division, a rounding, ... each
// writing an (out, in) temporary) is kept here as the *_ref functions: the fused kernels equal it
// bit for bit, NaN and infinities included. The backward recomputes the codes from w rather than
// saving an in-range mask in the forward: one more division per weight, but no (out, in) tensor
// kept alive between forward and backward for every layer of the model.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace rqat::ops {

// Whether the fused kernels run for this weight: float32 on the CPU, or on CUDA when rqat was
// built with its CUDA kernels. Otherwise callers use the *_ref composite (any float dtype).
bool fused_fake_quant_ste_supported(const at::Tensor& w);
// Whether a caller should run them: supported, and ops/kernel_choice.h picks the custom kernel on
// w's device (else the *_ref composites, its twin, which give the same bits).
bool use_fused_fake_quant_ste(const at::Tensor& w);

// w: (out, in) float32; scales, zeros: (out, groups) float32; g_idx: (in) int32 or int64 with
// entries in [0, groups); all on one device; max_code = 2^bits - 1 >= 1. Any layout (inputs are
// made contiguous). Returns w_q (out, in) float32. Throws rqat::Error on bad shapes, dtypes or (on
// the CPU) g_idx entries out of range; on CUDA an out-of-range entry stops the kernel with a
// device-side error, as the index_select of the ATen path would.
at::Tensor fake_quantize_ste_forward(const at::Tensor& w, const at::Tensor& scales,
                                     const at::Tensor& zeros, const at::Tensor& g_idx,
                                     int64_t max_code);

// grad_wq: (out, in) float32, the gradient of w_q; the other arguments as in the forward.
// Returns the clipped straight-through gradient of w.
at::Tensor fake_quantize_ste_backward(const at::Tensor& grad_wq, const at::Tensor& w,
                                      const at::Tensor& scales, const at::Tensor& zeros,
                                      const at::Tensor& g_idx, int64_t max_code);

// The same two functions as ATen composites, in any float dtype (scales and zeros in w's dtype),
// on any device: the formulation the fused kernels are tested against.
at::Tensor fake_quantize_ste_forward_ref(const at::Tensor& w, const at::Tensor& scales,
                                         const at::Tensor& zeros, const at::Tensor& g_idx,
                                         int64_t max_code);
at::Tensor fake_quantize_ste_backward_ref(const at::Tensor& grad_wq, const at::Tensor& w,
                                          const at::Tensor& scales, const at::Tensor& zeros,
                                          const at::Tensor& g_idx, int64_t max_code);

}  // namespace rqat::ops
