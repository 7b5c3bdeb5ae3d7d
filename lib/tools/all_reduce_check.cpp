// See all_reduce_check.h. The ranks are threads of this process meeting at a TCP store on a free
// loopback port, each with its own communicator (train::Communicator, as the trainers use).
#include "tools/all_reduce_check.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "io/error.h"
#include "train/distributed.h"

namespace rqat::tools {

namespace {

// A loopback port nobody listens on now (the kernel's choice for port 0).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fail("all-reduce check: cannot open a socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) fail("all-reduce check: no free loopback port");
  return ntohs(address.sin_port);
}

}  // namespace

AllReduceCheck check_all_reduce(const c10::Device& device) {
  AllReduceCheck out;
  const bool cuda = device.is_cuda();
  out.backend = cuda ? "nccl" : "gloo";
  out.ranks = cuda ? static_cast<int>(torch::cuda::device_count()) : 2;
  out.elements = cuda ? (int64_t{1} << 26) : (int64_t{1} << 22);  // 256 MiB / 16 MiB per rank
  if (out.ranks < 2) {
    out.skipped = true;
    out.detail = "one GPU visible: an all-reduce needs two";
    return out;
  }
  try {
    const int port = free_loopback_port();
    std::mutex mutex;
    std::vector<std::string> errors;
    std::vector<double> seconds(static_cast<size_t>(out.ranks), 0);
    const auto rank_body = [&](int rank) {
      try {
        train::DistributedEnv env;
        env.rank = rank;
        env.world_size = out.ranks;
        env.local_rank = rank;
        env.local_world_size = out.ranks;
        env.master_port = port;
        const c10::Device rank_device =
            cuda ? c10::Device(c10::kCUDA, rank) : c10::Device(c10::kCPU);
        auto comm = train::Communicator::create(env, train::CommBackend::kAuto, rank_device,
                                                std::chrono::seconds(120));
        const auto options = at::TensorOptions(rank_device).dtype(at::kFloat);
        std::vector<at::Tensor> tensors{at::full({out.elements}, rank + 1.0, options)};
        comm->all_reduce_sum(tensors);  // also the warm-up
        const double want = out.ranks * (out.ranks + 1) / 2.0;
        const double worst = (tensors[0] - want).abs().max().item<double>();
        if (worst != 0)
          fail("rank {}: the sum is off by {} (want {} everywhere)", rank, worst, want);
        constexpr int kTimed = 5;
        if (cuda) torch::cuda::synchronize(rank);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kTimed; ++i) comm->all_reduce_sum(tensors);
        if (cuda) torch::cuda::synchronize(rank);
        seconds[static_cast<size_t>(rank)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
            kTimed;
      } catch (const std::exception& e) {
        const std::string message = e.what();
        std::lock_guard lock(mutex);
        errors.push_back(message.substr(0, message.find('\n')));
      }
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < out.ranks; ++r) threads.emplace_back(rank_body, r);
    for (auto& t : threads) t.join();
    if (!errors.empty()) {
      out.detail = errors.front();
      return out;
    }
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    out.ms = 1e3 * slowest;
    const double bytes = 4.0 * static_cast<double>(out.elements);
    out.bus_gbps = 2.0 * (out.ranks - 1) / out.ranks * bytes / slowest / 1e9;
    out.passed = true;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    out.detail = message.substr(0, message.find('\n'));
  }
  return out;
}

}  // namespace rqat::tools
