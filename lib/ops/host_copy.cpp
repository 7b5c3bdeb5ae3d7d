// See host_copy.h.
#include "ops/host_copy.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <vector>

namespace rqat::ops {

at::Tensor copy_to_host(const at::Tensor& tensor) {
  RECORD_FUNCTION("rqat::copy_to_host", std::vector<c10::IValue>({tensor}));
  return tensor.to(at::kCPU);
}

at::Tensor copy_to_device(const at::Tensor& host, const c10::Device& device) {
  RECORD_FUNCTION("rqat::copy_to_device", std::vector<c10::IValue>({host}));
  return host.to(device);
}

at::Tensor on_device(const at::Tensor& tensor, const c10::Device& device, at::ScalarType dtype) {
  return tensor.device() == device ? tensor.to(dtype) : tensor.to(device, dtype);
}

}  // namespace rqat::ops
