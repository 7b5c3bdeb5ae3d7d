// The copies between host and device that rqat means to make, marked for dispatcher observers
// (bench/op_counter.h): "rqat::copy_to_host" is a host read (the host waits for the device; a
// decode step makes exactly one, the sampled ids), "rqat::copy_to_device" an upload of a step's
// inputs. Any other tensor move seen on the way is one nobody meant, and tests count it.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace rqat::ops {

at::Tensor copy_to_host(const at::Tensor& tensor);
at::Tensor copy_to_device(const at::Tensor& host, const c10::Device& device);

// `tensor` in `dtype` on `device`: a conversion where it already lives (no device argument, so no
// possible transfer for an observer to count), a copy only when it lives elsewhere. For per-layer
// code that receives tensors which normally already sit on the weight's device.
at::Tensor on_device(const at::Tensor& tensor, const c10::Device& device, at::ScalarType dtype);

}  // namespace rqat::ops
