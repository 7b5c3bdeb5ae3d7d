// See fake_quant_ste.h. The CPU kernels are one pass over the weight, four lanes at a time, rows
// split over threads; with contiguous groups each run of a group's columns shares one (s, z), with
// act-order maps the row's scales are gathered per column first (see for_each_row). The CUDA
// kernels live in cuda/ (fake_quant.cu for the forward, fake_quant_ste_backward.cu).
#include "ops/fake_quant_ste.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "io/error.h"
#include "ops/host_copy.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"
#include "ops/vector_lanes.h"

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "cuda/fake_quant.cuh"
#include "cuda/fake_quant_ste_backward.cuh"
#endif

namespace rqat::ops {

namespace {

struct Operands {
  at::Tensor w, scales, zeros, g_idx;  // contiguous; g_idx int32 on w's device
  int64_t rows = 0, cols = 0, groups = 0;
};

// Shapes, dtypes and devices (float32 only for the fused kernels); g_idx's values are checked
// by the kernels themselves.
void check_operands(const char* what, const at::Tensor& w, const at::Tensor& scales,
                    const at::Tensor& zeros, const at::Tensor& g_idx, int64_t max_code,
                    bool float32_only) {
  if (!w.defined() || w.dim() != 2 || !c10::isFloatingType(w.scalar_type()))
    fail("{}: the weight must be a 2-D float tensor (out, in)", what);
  if (float32_only && w.scalar_type() != at::kFloat)
    fail("{}: the weight must be float32, got {}", what, c10::toString(w.scalar_type()));
  const int64_t rows = w.size(0), cols = w.size(1);
  for (const at::Tensor* t : {&scales, &zeros}) {
    if (!t->defined() || t->dim() != 2 || t->size(0) != rows || t->sizes() != scales.sizes() ||
        t->scalar_type() != w.scalar_type() || t->device() != w.device())
      fail("{}: scales and zeros must be {} ({}, groups) on the weight's device", what,
           c10::toString(w.scalar_type()), rows);
  }
  if (cols > 0 && scales.size(1) == 0) fail("{}: scales have no groups", what);
  if (!g_idx.defined() || g_idx.dim() != 1 || g_idx.size(0) != cols ||
      (g_idx.scalar_type() != at::kInt && g_idx.scalar_type() != at::kLong))
    fail("{}: g_idx must be an int32/int64 tensor of {} entries", what, cols);
  if (max_code < 1 || max_code > 65535)
    fail("{}: max_code = {} (expected 1..65535)", what, max_code);
}

Operands fused_operands(const char* what, const at::Tensor& w, const at::Tensor& scales,
                        const at::Tensor& zeros, const at::Tensor& g_idx, int64_t max_code) {
  check_operands(what, w, scales, zeros, g_idx, max_code, /*float32_only=*/true);
  Operands op;
  op.w = w.contiguous();
  op.scales = scales.contiguous();
  op.zeros = zeros.contiguous();
  op.g_idx = on_device(g_idx, w.device(), at::kInt).contiguous();
  op.rows = w.size(0);
  op.cols = w.size(1);
  op.groups = scales.size(1);
  return op;
}

// Four lanes at a time through GCC/Clang vector extensions (SSE2 registers on the baseline
// x86-64 target the library is built for, NEON on aarch64; no intrinsics). Comparisons give lane
// masks of 0 or -1 (all bits set). Every lane operation has a scalar twin below with the same
// float operations, for the tails of runs, so both give the same bits.
using Floats = float __attribute__((vector_size(16)));
using Mask = int32_t __attribute__((vector_size(16)));
constexpr int64_t kLanes = 4;

inline Floats load(const float* p) { return load_lanes<Floats>(p); }
inline void store(float* p, Floats v) { store_lanes(p, v); }
inline Floats splat(float x) { return splat_lanes<Floats>(x); }
inline Floats select(Mask m, Floats a, Floats b) {
  return (Floats)((m & (Mask)a) | (~m & (Mask)b));
}

// Round half to even, as at::round and std::nearbyint in the default rounding mode: below 2^23,
// adding 2^23 leaves a float whose spacing is 1, so the addition itself rounds to the nearest
// integer (ties to even); from 2^23 on every float is an integer, and NaN and infinities pass
// through. (std::nearbyint is a libm call on the baseline target, which blocks vectorization.)
constexpr float kTwo23 = 8388608.0f;
inline float round_half_even(float x) {
  const float magnitude = std::fabs(x);
  const float rounded = std::copysign((magnitude + kTwo23) - kTwo23, x);
  return magnitude < kTwo23 ? rounded : x;
}
inline Floats round_half_even(Floats x) {
  const Mask bits = (Mask)x;
  const Floats magnitude = (Floats)(bits & std::numeric_limits<int32_t>::max());
  const Mask sign = bits & std::numeric_limits<int32_t>::min();
  const Floats rounded = (Floats)((Mask)((magnitude + kTwo23) - kTwo23) | sign);
  return select(magnitude < splat(kTwo23), rounded, x);
}

// w_q = (clamp(code, 0, max_q) - z) * s, the clamp passing NaN through as at::clamp does.
inline float fake_quant(float w, float s, float z, float max_q) {
  const float code = round_half_even(w / s) + z;
  const float q = code < 0.0f ? 0.0f : (code > max_q ? max_q : code);
  return (q - z) * s;
}
inline Floats fake_quant(Floats w, Floats s, Floats z, float max_q) {
  const Floats code = round_half_even(w / s) + z;
  const Floats top = splat(max_q);
  const Floats q = select(code < Floats{}, Floats{}, select(code > top, top, code));
  return (q - z) * s;
}

// The gradient where the code is not outside [0, max_q], else +0: "not outside" rather than
// "inside", so that a NaN code passes the gradient, as in the ATen path.
inline float ste_grad(float grad, float w, float s, float z, float max_q) {
  const float code = round_half_even(w / s) + z;
  return code < 0.0f || code > max_q ? 0.0f : grad;
}
inline Floats ste_grad(Floats grad, Floats w, Floats s, Floats z, float max_q) {
  const Floats code = round_half_even(w / s) + z;
  const Mask outside = (code < Floats{}) | (code > splat(max_q));
  return (Floats)(~outside & (Mask)grad);
}

// n consecutive weights of one row; their scales and zeros are s[i], z[i] (kPerColumn) or all
// s[0], z[0] (a run of one group). n >= 1.
template <bool kPerColumn>
void forward_span(const float* w, float* out, const float* s, const float* z, int64_t n,
                  float max_q) {
  const Floats s0 = splat(s[0]), z0 = splat(z[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Floats sv = kPerColumn ? load(s + i) : s0, zv = kPerColumn ? load(z + i) : z0;
    store(out + i, fake_quant(load(w + i), sv, zv, max_q));
  }
  for (; i < n; ++i) out[i] = fake_quant(w[i], s[kPerColumn ? i : 0], z[kPerColumn ? i : 0], max_q);
}

template <bool kPerColumn>
void backward_span(const float* grad, const float* w, float* out, const float* s, const float* z,
                   int64_t n, float max_q) {
  const Floats s0 = splat(s[0]), z0 = splat(z[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Floats sv = kPerColumn ? load(s + i) : s0, zv = kPerColumn ? load(z + i) : z0;
    store(out + i, ste_grad(load(grad + i), load(w + i), sv, zv, max_q));
  }
  for (; i < n; ++i)
    out[i] = ste_grad(grad[i], w[i], s[kPerColumn ? i : 0], z[kPerColumn ? i : 0], max_q);
}

struct ColumnRun {
  int64_t begin, end, group;
};

// Maximal runs of consecutive columns with the same group; throws on an entry outside
// [0, groups), which would otherwise read another row's scales.
std::vector<ColumnRun> column_runs(const at::Tensor& g_idx, int64_t groups, const char* what) {
  const int32_t* g = g_idx.data_ptr<int32_t>();
  const int64_t cols = g_idx.size(0);
  std::vector<ColumnRun> runs;
  for (int64_t c = 0; c < cols; ++c) {
    if (g[c] < 0 || g[c] >= groups)
      fail("{}: g_idx[{}] = {} is outside [0, {})", what, c, g[c], groups);
    if (runs.empty() || runs.back().group != g[c])
      runs.push_back({c, c + 1, g[c]});
    else
      runs.back().end = c + 1;
  }
  return runs;
}

// Calls span(row, begin, end, s, z, per_column) over every row (rows split over threads). With
// contiguous groups the runs are long and each shares one (s, z); with short runs (act-order)
// the row's scales and zeros are first copied out per column, so the vector loop still covers
// the whole row.
template <typename Span>
void for_each_row(const Operands& op, const char* what, const Span& span) {
  if (op.rows == 0 || op.cols == 0) return;
  const auto runs = column_runs(op.g_idx, op.groups, what);
  const bool per_column = static_cast<int64_t>(runs.size()) * 16 > op.cols;
  const float* scales = op.scales.data_ptr<float>();
  const float* zeros = op.zeros.data_ptr<float>();
  const int32_t* g_idx = op.g_idx.data_ptr<int32_t>();
  const int64_t cols = op.cols, groups = op.groups;
  const int64_t grain = std::max<int64_t>(1, 32768 / cols);
  at::parallel_for(0, op.rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> s_row(per_column ? cols : 0), z_row(per_column ? cols : 0);
    for (int64_t r = begin; r < end; ++r) {
      const float* s = scales + r * groups;
      const float* z = zeros + r * groups;
      if (per_column) {
        for (int64_t c = 0; c < cols; ++c) {
          s_row[c] = s[g_idx[c]];
          z_row[c] = z[g_idx[c]];
        }
        span(r, 0, cols, s_row.data(), z_row.data(), std::true_type{});
      } else {
        for (const ColumnRun& run : runs)
          span(r, run.begin, run.end, s + run.group, z + run.group, std::false_type{});
      }
    }
  });
}

// The forward (grad undefined) or the backward (grad contiguous, as op.w) on the CPU.
at::Tensor fused_cpu(const Operands& op, const at::Tensor& grad, int64_t max_code,
                     const char* what) {
  auto out = at::empty_like(op.w);
  const float* w = op.w.data_ptr<float>();
  const float* g = grad.defined() ? grad.data_ptr<float>() : nullptr;
  float* dst = out.data_ptr<float>();
  const float max_q = static_cast<float>(max_code);
  const int64_t cols = op.cols;
  for_each_row(
      op, what,
      [&](int64_t r, int64_t begin, int64_t end, const float* s, const float* z, auto per_column) {
        constexpr bool kPerColumn = decltype(per_column)::value;
        const int64_t at = r * cols + begin;
        if (g)
          backward_span<kPerColumn>(g + at, w + at, dst + at, s, z, end - begin, max_q);
        else
          forward_span<kPerColumn>(w + at, dst + at, s, z, end - begin, max_q);
      });
  return out;
}

#ifdef RQAT_WITH_CUDA
void check_cuda(int err, const char* what) {
  if (err != 0)
    fail("{}: CUDA kernel failed: {}", what, cudaGetErrorString(static_cast<cudaError_t>(err)));
}
#endif

// The fused forward (grad undefined) or backward (grad: contiguous, as op.w) on op.w's device:
// the CPU loops or the CUDA kernels, which write into a fresh tensor.
at::Tensor run_fused_on_device(const char* what, const Operands& op, const at::Tensor& grad,
                               int64_t max_code) {
  if (op.w.is_cpu()) return fused_cpu(op, grad, max_code, what);
#ifdef RQAT_WITH_CUDA
  if (op.w.is_cuda()) {
    auto out = at::empty_like(op.w);
    const c10::cuda::CUDAGuard on_device(op.w.device());  // launch on w's device's stream
    const auto stream = c10::cuda::getCurrentCUDAStream().stream();
    const float* w = op.w.data_ptr<float>();
    const float* scales = op.scales.data_ptr<float>();
    const float* zeros = op.zeros.data_ptr<float>();
    const int32_t* g_idx = op.g_idx.data_ptr<int32_t>();
    check_cuda(grad.defined()
                   ? cuda::launch_fake_quant_ste_backward(
                         grad.data_ptr<float>(), w, out.data_ptr<float>(), scales, zeros, g_idx,
                         op.rows, op.cols, op.groups, max_code, stream)
                   : cuda::launch_fake_quant_indexed(w, out.data_ptr<float>(), scales, zeros, g_idx,
                                                     op.rows, op.cols, op.groups, max_code, stream),
               what);
    return out;
  }
#endif
  fail("{}: no fused kernel for a weight on {} (see fused_fake_quant_ste_supported)", what,
       op.w.device().str());
}

// The kernels' output, perturbed by the test-only fault hook (ops/kernel_choice.h) when armed.
at::Tensor run_fused(const char* what, const Operands& op, const at::Tensor& grad,
                     int64_t max_code) {
  RQAT_MARK_KERNEL(grad.defined() ? "rqat::fake_quant_ste_backward"
                                  : "rqat::fake_quant_ste_forward");
  at::Tensor out = run_fused_on_device(what, op, grad, max_code);
  if (kernel_fault(Kernel::kFakeQuant)) perturb_kernel_output(out, 0, at::Tensor());
  return out;
}

}  // namespace

bool use_fused_fake_quant_ste(const at::Tensor& w) {
  return fused_fake_quant_ste_supported(w) && use_custom_kernel(Kernel::kFakeQuant, w.device());
}

bool fused_fake_quant_ste_supported(const at::Tensor& w) {
  if (!w.defined() || w.scalar_type() != at::kFloat) return false;
  if (w.is_cpu()) return true;
#ifdef RQAT_WITH_CUDA
  return w.is_cuda();
#else
  return false;
#endif
}

at::Tensor fake_quantize_ste_forward(const at::Tensor& w, const at::Tensor& scales,
                                     const at::Tensor& zeros, const at::Tensor& g_idx,
                                     int64_t max_code) {
  constexpr const char* what = "fake_quantize_ste_forward";
  return run_fused(what, fused_operands(what, w, scales, zeros, g_idx, max_code), at::Tensor(),
                   max_code);
}

at::Tensor fake_quantize_ste_backward(const at::Tensor& grad_wq, const at::Tensor& w,
                                      const at::Tensor& scales, const at::Tensor& zeros,
                                      const at::Tensor& g_idx, int64_t max_code) {
  constexpr const char* what = "fake_quantize_ste_backward";
  const Operands op = fused_operands(what, w, scales, zeros, g_idx, max_code);
  if (!grad_wq.defined() || grad_wq.sizes() != w.sizes() || grad_wq.scalar_type() != at::kFloat ||
      grad_wq.device() != w.device())
    fail("{}: the gradient must be float32 {} on the weight's device", what, c10::str(w.sizes()));
  return run_fused(what, op, grad_wq.contiguous(), max_code);
}

at::Tensor fake_quantize_ste_forward_ref(const at::Tensor& w, const at::Tensor& scales,
                                         const at::Tensor& zeros, const at::Tensor& g_idx,
                                         int64_t max_code) {
  check_operands("fake_quantize_ste_forward_ref", w, scales, zeros, g_idx, max_code, false);
  auto index = on_device(g_idx, w.device(), at::kLong);
  auto s = scales.index_select(1, index), z = zeros.index_select(1, index);
  auto q = at::clamp(at::round(w / s) + z, 0, max_code);  // at::round: half to even
  return (q - z) * s;
}

at::Tensor fake_quantize_ste_backward_ref(const at::Tensor& grad_wq, const at::Tensor& w,
                                          const at::Tensor& scales, const at::Tensor& zeros,
                                          const at::Tensor& g_idx, int64_t max_code) {
  check_operands("fake_quantize_ste_backward_ref", w, scales, zeros, g_idx, max_code, false);
  auto index = on_device(g_idx, w.device(), at::kLong);
  auto s = scales.index_select(1, index), z = zeros.index_select(1, index);
  auto code = at::round(w / s) + z;  // before clamping
  auto inside = at::logical_not(at::logical_or(at::lt(code, 0), at::gt(code, max_code)));
  return at::where(inside, grad_wq, at::zeros_like(grad_wq));
}

}  // namespace rqat::ops
