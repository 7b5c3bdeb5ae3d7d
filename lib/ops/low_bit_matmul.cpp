// See low_bit_matmul.h. Shapes and devices are checked here; the kernels take raw pointers.
#include "ops/low_bit_matmul.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>

#include "io/error.h"
#include "ops/cpu_target.h"
#include "ops/kernel_choice.h"
#include "ops/kernel_mark.h"
#include "ops/low_bit_gemv_call.h"
#include "ops/low_bit_matmul_int8_kernel.h"
#include "ops/low_bit_matmul_kernel.h"

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/low_bit_gemv.cuh"
#include "cuda/low_bit_gemv_wide.cuh"
#endif

namespace rqat::ops {
namespace {

void check_input(const at::Tensor& x, const LowBitWeight& w) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != w.in_features)
    fail("low_bit_matmul: the input's last dimension must be in_features = {}", w.in_features);
  if (!x.is_floating_point()) fail("low_bit_matmul: the input must be a float tensor");
  if (x.device() != w.codes.device())
    fail("low_bit_matmul: the input is on {}, the weight on {}", x.device().str(),
         w.codes.device().str());
}

std::vector<int64_t> output_shape(const at::Tensor& x, const LowBitWeight& w) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.out_features;
  return shape;
}

// Each group's columns zero-padded to whole blocks of 32, as the kernels read them:
// (rows, groups * blocks_per_group * 32) float32.
at::Tensor padded_groups(const at::Tensor& x, const LowBitWeight& w) {
  const int64_t rows = x.size(0), groups = w.groups(), width = w.blocks_per_group() * 32;
  const at::Tensor xf = x.to(at::kFloat);
  if (width == w.group_size && groups * width == w.in_features) return xf.contiguous();
  at::Tensor out = at::zeros({rows, groups, width}, xf.options());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * w.group_size;
    const int64_t length = std::min(w.group_size, w.in_features - first);
    out.select(1, g).narrow(1, 0, length).copy_(xf.narrow(1, first, length));
  }
  return out.view({rows, groups * width});
}

// Each group's sum of x: (rows, groups) float32.
at::Tensor group_sums(const at::Tensor& padded, const LowBitWeight& w) {
  return padded.view({padded.size(0), w.groups(), w.blocks_per_group() * 32}).sum(-1);
}

// The test-only fault hook (ops/kernel_choice.h): y off by just over the kernels' tolerance.
void perturb_if_faulty(at::Tensor& y, const at::Tensor& x, const LowBitWeight& w) {
  if (!kernel_fault(Kernel::kLowBitMatmul)) return;
  const double tolerance =
      x.scalar_type() == at::kFloat ? kLowBitMatmulTolerance : kLowBitMatmulTolerance16;
  perturb_kernel_output(y, tolerance, low_bit_error_scale(x, w).view(y.sizes()));
}

}  // namespace

at::Tensor low_bit_error_scale(const at::Tensor& x, const LowBitWeight& w) {
  const at::Tensor weight = dequantize_low_bit(w).to(x.device());
  return at::matmul(x.to(at::kFloat).abs(), weight.abs().t()).clamp_min(1e-3);
}

at::Tensor low_bit_matmul_ref(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  const at::Tensor weight = dequantize_low_bit(w).to(x.device());
  return at::matmul(x.to(at::kFloat), weight.t()).to(x.scalar_type());
}

at::Tensor low_bit_matmul_dense(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  const at::Tensor weight = dequantize_low_bit(w).to(x.device(), x.scalar_type());
  return at::matmul(x, weight.t());
}

namespace {

// The weight's side of the kernels' arguments (the tensors must outlive them).
struct WeightOperands {
  at::Tensor codes, scales, zeros;
  LowBitKernelArgs args;
};

// Only the AVX2 GEMV reads the float16 copies of scales and zeros; the other callers do not ask
// for them, so that a weight never pays for a copy no kernel of this machine reads.
enum class HalfScales { kSkip, kIfExact };

WeightOperands weight_operands(const LowBitWeight& w, HalfScales half_scales) {
  WeightOperands op{w.codes.contiguous(), w.scales.contiguous(), w.zeros.contiguous(), {}};
  op.args.codes = reinterpret_cast<const uint32_t*>(op.codes.data_ptr<int32_t>());
  op.args.scales = op.scales.data_ptr<float>();
  op.args.zeros = op.zeros.data_ptr<float>();
  op.args.out = w.out_features;
  op.args.groups = w.groups();
  op.args.blocks_per_group = w.blocks_per_group();
  op.args.words_per_row = w.words_per_row();
  op.args.x_stride = w.groups() * w.blocks_per_group() * 32;
  op.args.bits = w.bits;
  const LowBitHalfScales* half =  // lives as long as the weight
      half_scales == HalfScales::kIfExact ? exact_half_scales(w) : nullptr;
  if (half != nullptr) {
    op.args.scales16 = reinterpret_cast<const uint16_t*>(half->scales.data_ptr<at::Half>());
    op.args.zeros16 = reinterpret_cast<const uint16_t*>(half->zeros.data_ptr<at::Half>());
    op.args.zeros_shared = low_bit_zeros_shared(w);  // read by the same AVX2 code only
  }
  return op;
}

}  // namespace

at::Tensor low_bit_matmul_cpu_kernel(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  if (!x.device().is_cpu()) fail("low_bit_matmul_cpu_kernel: the input is on {}", x.device().str());
  RQAT_MARK_KERNEL("rqat::low_bit_matmul_cpu");
  const at::Tensor padded = padded_groups(in_kernel_order(x, w), w);
  const at::Tensor sums = group_sums(padded, w).contiguous();
  WeightOperands op = weight_operands(
      w, cpu_target() == CpuTarget::kAvx2 ? HalfScales::kIfExact : HalfScales::kSkip);
  at::Tensor y = at::empty({padded.size(0), w.out_features}, at::kFloat);
  op.args.x = padded.data_ptr<float>();
  op.args.xsum = sums.data_ptr<float>();
  op.args.batch = padded.size(0);
  op.args.y = y.data_ptr<float>();
  if (op.args.batch > 0) low_bit_matmul_cpu(op.args);
  at::Tensor out = y.view(output_shape(x, w)).to(x.scalar_type());
  perturb_if_faulty(out, x, w);
  return out;
}

at::Tensor low_bit_matmul_cpu_gemm(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  if (!x.device().is_cpu()) fail("low_bit_matmul_cpu_gemm: the input is on {}", x.device().str());
  RQAT_MARK_KERNEL("rqat::low_bit_matmul_cpu_gemm");
  const at::Tensor padded = padded_groups(in_kernel_order(x, w), w);
  const WeightOperands op = weight_operands(w, HalfScales::kSkip);
  const int64_t rows = padded.size(0), width = op.args.x_stride;
  // y transposed, so that each tile's product lands in contiguous rows.
  at::Tensor y_t = at::empty({w.out_features, rows}, at::kFloat);
  const int64_t tile = std::clamp<int64_t>(kLowBitGemmTileFloats / std::max<int64_t>(width, 1), 8,
                                           std::max<int64_t>(8, w.out_features));
  at::Tensor weights = at::empty({std::min(tile, w.out_features), width}, at::kFloat);
  for (int64_t o = 0; o < w.out_features && rows > 0; o += tile) {
    const int64_t n = std::min(tile, w.out_features - o);
    low_bit_dequantize_rows(op.args, o, o + n, weights.data_ptr<float>());
    at::Tensor y_tile = y_t.narrow(0, o, n);  // contiguous rows of y_t
    at::mm_out(y_tile, weights.narrow(0, 0, n), padded.t());
  }
  at::Tensor out = y_t.t().contiguous().view(output_shape(x, w)).to(x.scalar_type());
  perturb_if_faulty(out, x, w);
  return out;
}

namespace {
std::atomic<LowBitActivations> process_activations{LowBitActivations::kFloat};
}  // namespace

int64_t low_bit_gemm_rows() {
  switch (cpu_target()) {
    case CpuTarget::kAvx512:
      return kLowBitGemmRows;
    case CpuTarget::kAvx2:
      return kLowBitGemmRowsAvx2;
    default:
      return kLowBitGemmRowsBaseline;
  }
}

int64_t low_bit_int8_rows() {
  return cpu_target() == CpuTarget::kBaseline ? low_bit_gemm_rows() : kLowBitKernelRows;
}

LowBitActivations low_bit_activations() { return process_activations.load(); }
void set_low_bit_activations(LowBitActivations activations) { process_activations = activations; }

at::Tensor low_bit_int8_error_scale(const at::Tensor& x, const LowBitWeight& w) {
  const at::Tensor padded = padded_groups(in_kernel_order(x, w).cpu(), w);
  const at::Tensor bound = low_bit_int8_error_bound(padded, w).to(x.device());
  const double rounding =  // of the sums (float32 x), or of the output (16-bit x)
      x.scalar_type() == at::kFloat ? kLowBitMatmulTolerance : kLowBitMatmulTolerance16;
  return (bound + rounding * low_bit_error_scale(x, w).view(bound.sizes()))
      .view(output_shape(x, w));
}

at::Tensor low_bit_matmul_cpu_int8_kernel(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  if (!x.device().is_cpu())
    fail("low_bit_matmul_cpu_int8_kernel: the input is on {}", x.device().str());
  RQAT_MARK_KERNEL("rqat::low_bit_matmul_cpu_int8");
  const at::Tensor y = low_bit_matmul_int8(padded_groups(in_kernel_order(x, w), w), w);
  at::Tensor out = y.view(output_shape(x, w)).to(x.scalar_type());
  if (kernel_fault(Kernel::kLowBitMatmul))
    perturb_kernel_output(out, kLowBitInt8Tolerance, low_bit_int8_error_scale(x, w));
  return out;
}

at::Tensor low_bit_matmul_cuda_kernel(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
#ifdef RQAT_WITH_CUDA
  if (!x.is_cuda()) fail("low_bit_matmul_cuda_kernel: the input is on {}", x.device().str());
  const int64_t rows = x.numel() / w.in_features;
  if (rows > cuda::kLowBitGemvMaxRows)
    fail("low_bit_matmul_cuda_kernel: {} rows (at most {})", rows, cuda::kLowBitGemvMaxRows);
  RQAT_MARK_KERNEL("rqat::low_bit_gemv");
  const c10::cuda::CUDAGuard on_device(x.device());  // the launch goes to x's device's stream
  // One launch for float32 or bf16 x in the inputs' order (act-order adds a gather): the wide
  // GEMV for 1-4 rows of a weight with whole 16-byte steps (every real layer), else the first.
  const LowBitGemvCall call = prepare_low_bit_gemv(x, w);
  if (rows > 0) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const int err = cuda::wide_gemv_applies(call.args)
                        ? cuda::launch_low_bit_gemv_wide(call.args, stream)
                        : cuda::launch_low_bit_gemv(call.args, stream);
    if (err != 0)
      fail("low_bit_matmul: CUDA kernel failed: {}",
           cudaGetErrorString(static_cast<cudaError_t>(err)));
  }
  at::Tensor out = call.y.view(output_shape(x, w)).to(x.scalar_type());
  perturb_if_faulty(out, x, w);
  return out;
#else
  fail("low_bit_matmul_cuda_kernel: rqat was built without CUDA kernels (input on {})",
       x.device().str());
#endif
}

at::Tensor low_bit_matmul(const at::Tensor& x, const LowBitWeight& w) {
  check_input(x, w);
  const int64_t rows = x.numel() / w.in_features;
  if (x.device().is_cpu() && use_custom_kernel(Kernel::kLowBitMatmul, x.device())) {
    if (w.bits <= 4 && low_bit_activations() == LowBitActivations::kInt8 &&
        rows <= low_bit_int8_rows())
      return low_bit_matmul_cpu_int8_kernel(x, w);
    return rows <= low_bit_gemm_rows() ? low_bit_matmul_cpu_kernel(x, w)
                                       : low_bit_matmul_cpu_gemm(x, w);
  }
#ifdef RQAT_WITH_CUDA
  if (x.is_cuda() && rows <= cuda::kLowBitGemvMaxRows &&
      use_custom_kernel(Kernel::kLowBitMatmul, x.device()))
    return low_bit_matmul_cuda_kernel(x, w);
#endif
  // Many rows on a GPU, no kernel for the device, or the twin chosen.
  return low_bit_matmul_dense(x, w);
}

}  // namespace rqat::ops
