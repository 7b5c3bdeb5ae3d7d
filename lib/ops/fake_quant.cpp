// See fake_quant.h. Shapes and dtypes are checked here; the CUDA kernel (cuda/fake_quant.cu) takes
// raw pointers and sizes only.
#include "ops/fake_quant.h"

#include <ATen/ATen.h>

#include <cmath>

#include "io/error.h"
#include "ops/kernel_choice.h"

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "cuda/fake_quant.cuh"
#include "ops/kernel_mark.h"
#endif

namespace rqat::ops {

namespace {

int64_t checked_group_size(const at::Tensor& w, const at::Tensor& scales, const at::Tensor& zeros,
                           int bits, int64_t group_size) {
  if (w.dim() != 2) fail("fake_quantize: weight must be 2-D (out, in), got {} dims", w.dim());
  if (w.scalar_type() != at::kFloat && w.scalar_type() != at::kBFloat16) {
    fail("fake_quantize: weight dtype {} (supported: float32, bfloat16)",
         c10::toString(w.scalar_type()));
  }
  if (bits < 1 || bits > 8) fail("fake_quantize: bits = {} (supported: 1..8)", bits);
  const int64_t cols = w.size(1);
  const int64_t group = group_size <= 0 ? cols : group_size;
  if (cols % group != 0)
    fail("fake_quantize: in_features {} is not a multiple of group_size {}", cols, group);
  const std::vector<int64_t> expected{w.size(0), cols / group};
  for (const at::Tensor* t : {&scales, &zeros}) {
    if (t->sizes().vec() != expected || t->scalar_type() != at::kFloat ||
        t->device() != w.device()) {
      fail("fake_quantize: scales and zeros must be float32 ({}, {}) on the weight's device",
           expected[0], expected[1]);
    }
  }
  return group;
}

}  // namespace

at::Tensor fake_quantize_groupwise_cuda(const at::Tensor& w, const at::Tensor& scales,
                                        const at::Tensor& zeros, int bits, int64_t group_size) {
  const int64_t group = checked_group_size(w, scales, zeros, bits, group_size);
  if (!w.is_cuda())
    fail("fake_quantize: the CUDA kernel takes CUDA tensors, got {}", w.device().str());
#ifdef RQAT_WITH_CUDA
  RQAT_MARK_KERNEL("rqat::fake_quant_groupwise");
  const c10::cuda::CUDAGuard on_device(w.device());  // the launch goes to w's device's stream
  auto wc = w.contiguous();
  auto out = at::empty_like(wc);
  auto sc = scales.contiguous(), zc = zeros.contiguous();
  const auto dtype =
      w.scalar_type() == at::kFloat ? cuda::FakeQuantDType::kF32 : cuda::FakeQuantDType::kBF16;
  const int err = cuda::launch_fake_quant_groupwise(
      wc.data_ptr(), out.data_ptr(), sc.data_ptr<float>(), zc.data_ptr<float>(), wc.size(0),
      wc.size(1), group, bits, dtype, c10::cuda::getCurrentCUDAStream().stream());
  if (err != 0)
    fail("fake_quantize: CUDA kernel failed: {}",
         cudaGetErrorString(static_cast<cudaError_t>(err)));
  if (kernel_fault(Kernel::kFakeQuant)) perturb_kernel_output(out, 0, at::Tensor());
  return out;
#else
  (void)group;
  fail("fake_quantize: rqat was built without CUDA kernels (nvcc not found at build time)");
#endif
}

at::Tensor fake_quantize_groupwise(const at::Tensor& w, const at::Tensor& scales,
                                   const at::Tensor& zeros, int bits, int64_t group_size) {
  const int64_t group = checked_group_size(w, scales, zeros, bits, group_size);
  if (w.is_cuda() && custom_kernel_exists(Kernel::kFakeQuant, w.device()) &&
      use_custom_kernel(Kernel::kFakeQuant, w.device()))
    return fake_quantize_groupwise_cuda(w, scales, zeros, bits, group_size);
  // The twin (and every other device's path): ATen composites in float32.
  const int64_t rows = w.size(0), groups = w.size(1) / group;
  const double max_q = std::ldexp(1.0, bits) - 1;
  auto grouped = w.to(at::kFloat).view({rows, groups, group});
  auto s = scales.unsqueeze(-1), z = zeros.unsqueeze(-1);
  auto q = at::clamp(at::round(grouped / s) + z, 0.0, max_q);  // at::round rounds half to even
  return ((q - z) * s).view({rows, groups * group}).to(w.scalar_type());
}

at::Tensor fake_quantize_groupwise_ref(const at::Tensor& w, const at::Tensor& scales,
                                       const at::Tensor& zeros, int bits, int64_t group_size) {
  const int64_t group = checked_group_size(w, scales, zeros, bits, group_size);
  auto wf = w.to(at::kCPU, at::kFloat).contiguous();
  auto sc = scales.to(at::kCPU).contiguous(), zc = zeros.to(at::kCPU).contiguous();
  auto out = at::empty_like(wf);
  const float* src = wf.data_ptr<float>();
  const float* s = sc.data_ptr<float>();
  const float* z = zc.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t rows = wf.size(0), cols = wf.size(1), groups = cols / group;
  const float max_q = static_cast<float>((1 << bits) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = r * groups + c / group;
      // Comparisons, not fmin/fmax: a NaN weight stays NaN, as at::clamp and the kernel keep it.
      const float code = std::nearbyint(src[r * cols + c] / s[g]) + z[g];
      const float q = code < 0.0f ? 0.0f : (code > max_q ? max_q : code);
      dst[r * cols + c] = (q - z[g]) * s[g];
    }
  }
  return out.to(w.scalar_type());
}

}  // namespace rqat::ops
