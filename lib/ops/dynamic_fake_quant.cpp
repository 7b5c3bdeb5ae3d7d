// See dynamic_fake_quant.h.
#include "ops/dynamic_fake_quant.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "io/error.h"

namespace rqat::ops {

namespace {

void check(const at::Tensor& y, int bits) {
  if (bits < 2 || bits > 8) fail("activation fake quantization: bits = {} (2..8)", bits);
  if (!c10::isFloatingType(y.scalar_type()))
    fail("activation fake quantization: a float tensor is needed, got {}",
         c10::toString(y.scalar_type()));
}

}  // namespace

at::Tensor fake_quantize_dynamic_per_tensor(const at::Tensor& y, int bits,
                                            ActivationQuantGrad grad) {
  check(y, bits);
  const double qmax = std::ldexp(1.0, bits - 1) - 1;
  // float64 stays float64 (gradient checks); everything else computes in float32.
  const at::ScalarType compute = y.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor x = y.to(compute);
  if (grad == ActivationQuantGrad::kSte) {
    at::Tensor q;
    {
      at::NoGradGuard no_grad;
      q = fake_quantize_dynamic_per_tensor(x.detach(), bits, ActivationQuantGrad::kReference);
    }
    return (x + (q - x.detach())).to(y.scalar_type());
  }
  const at::Tensor amax = x.abs().max();
  // An all-zero tensor: any positive step represents it; the guard keeps 0 / 0 out.
  const at::Tensor s = at::where(amax > 0, amax, at::ones_like(amax)) / qmax;
  const at::Tensor codes = at::clamp(at::round(x / s), -qmax - 1, qmax);
  return (codes * s).to(y.scalar_type());
}

at::Tensor fake_quantize_dynamic_per_tensor_ref(const at::Tensor& y, int bits) {
  check(y, bits);
  const at::Tensor x = y.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
  const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(in[i]));
  const float s = (amax > 0 ? amax : 1.0f) / qmax;
  for (int64_t i = 0; i < n; ++i) {
    const float code = std::min(std::max(std::nearbyint(in[i] / s), -qmax - 1), qmax);
    o[i] = code * s;
  }
  return out;
}

}  // namespace rqat::ops
