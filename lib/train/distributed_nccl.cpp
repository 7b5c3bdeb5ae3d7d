// The NCCL process group for CUDA devices (used by Communicator::create in distributed.cpp).
// ProcessGroupNCCL.hpp declares its class only with USE_C10D_NCCL and needs CUDA and nccl.h (the
// nvidia-nccl wheel's, found by cmake/nccl.cmake); the code itself lives in libtorch_cuda. The
// whole file is empty in CPU builds, since lib/ compiles every .cpp it holds.
#if defined(RQAT_WITH_CUDA)

#define USE_C10D_NCCL 1

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdint>
#include <string>

namespace rqat::train::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size, c10::Device& device,
                                                    std::chrono::milliseconds timeout) {
  // NCCL binds its communicator to the current CUDA device: set it to the trainer's device, or
  // every local rank would open its communicator on device 0. "cuda" without an index means the
  // current device, recorded so that later staging copies go to the same one.
  if (!device.has_index()) device = c10::Device(c10::kCUDA, c10::cuda::current_device());
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace rqat::train::detail

namespace rqat::train {

std::string nccl_version() {
  // The NCCL torch was built with, as torch.cuda.nccl.version() reports it (libtorch_cuda holds
  // NCCL's symbols; rqat does not link libnccl itself).
  const std::uint64_t v = torch::cuda::nccl::version();
  return std::to_string(v >> 32) + "." + std::to_string((v >> 16) & 0xffff) + "." +
         std::to_string(v & 0xffff);
}

}  // namespace rqat::train

#endif  // RQAT_WITH_CUDA
