// See low_bit_gemv_call.h.
#include "ops/low_bit_gemv_call.h"

#include <ATen/ATen.h>

#include "io/error.h"

namespace rqat::ops {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

LowBitGemvCall prepare_low_bit_gemv(const at::Tensor& x, const LowBitWeight& w) {
  const int64_t rows = x.numel() / w.in_features;
  if (rows > cuda::kLowBitGemvMaxRows)
    fail("low_bit_gemv: {} rows of x, the kernel takes at most {}", rows, cuda::kLowBitGemvMaxRows);
  LowBitGemvCall call;
  at::Tensor xk = in_kernel_order(x, w);
  if (xk.scalar_type() != at::kBFloat16) xk = xk.to(at::kFloat);
  call.x = xk.contiguous();
  call.y = at::empty({rows, w.out_features}, call.x.options());
  call.codes = w.codes.contiguous();
  call.scales = w.scales.contiguous();
  call.zeros = w.zeros.contiguous();
  if (!aligned16(call.codes.data_ptr()))
    fail("low_bit_gemv: the packed codes are not 16-byte aligned (a view into another tensor?)");

  cuda::LowBitGemvArgs& a = call.args;
  a.x = call.x.data_ptr();
  a.x_stride = w.in_features;
  a.x_bf16 = call.x.scalar_type() == at::kBFloat16;
  // Vector loads of x need every unit's 16 columns whole (groups and rows of whole units) and
  // 16-byte aligned; otherwise the kernel reads x one element at a time.
  a.x_vector = w.group_size % 16 == 0 && w.in_features % 16 == 0 && aligned16(a.x) &&
               (a.x_stride * call.x.element_size()) % 16 == 0;
  a.rows = rows;
  a.in_features = w.in_features;
  a.group_size = w.group_size;
  a.groups = w.groups();
  a.blocks_per_group = w.blocks_per_group();
  a.words_per_row = w.words_per_row();
  a.bits = w.bits;
  a.codes = reinterpret_cast<const uint32_t*>(call.codes.data_ptr<int32_t>());
  a.scales = call.scales.data_ptr<float>();
  a.zeros = call.zeros.data_ptr<float>();
  a.out = w.out_features;
  a.y = call.y.data_ptr();
  return call;
}

}  // namespace rqat::ops
