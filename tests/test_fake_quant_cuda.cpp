// The fake-quantization CUDA kernel against the CPU reference, bit for bit, on awkward shapes.
// Without a GPU (or without CUDA kernels in the build) it prints why and exits 77, which CTest
// reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <iostream>

#include "ops/fake_quant.h"

TEST_CASE("fake quant CUDA kernel equals the CPU reference") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 32, 32}, {7, 96, 32}, {3, 256, 128},    {4, 40, -1},
                          {1, 1, 1},   {9, 33, 11}, {2048, 4096, 128}};
  for (const auto& s : shapes) {
    for (int bits : {2, 3, 4, 8}) {
      for (auto dtype : {at::kFloat, at::kBFloat16}) {
        INFO("rows " << s.rows << " cols " << s.cols << " group " << s.group << " bits " << bits);
        const int64_t group = s.group <= 0 ? s.cols : s.group;
        auto w = (at::randn({s.rows, s.cols}, gen) * 0.05).to(dtype);
        auto g = w.to(at::kFloat).view({s.rows, -1, group});
        auto lo = g.amin(-1).clamp_max(0), hi = g.amax(-1).clamp_min(0);
        auto scale = ((hi - lo) / ((1 << bits) - 1)).clamp_min(1e-8);
        auto zero = at::round(-lo / scale);
        auto ref = rqat::ops::fake_quantize_groupwise_ref(w, scale, zero, bits, s.group);
        auto gpu =
            rqat::ops::fake_quantize_groupwise(w.cuda(), scale.cuda(), zero.cuda(), bits, s.group)
                .cpu();
        CHECK(at::equal(gpu, ref));
      }
    }
  }
}

int main(int argc, char** argv) {
#ifndef RQAT_WITH_CUDA
  std::cout << "SKIPPED: rqat was built without CUDA kernels (no nvcc)\n";
  return 77;
#else
  if (!torch::cuda::is_available()) {
    std::cout
        << "SKIPPED: no CUDA device on this machine; the kernel compiled but cannot run here\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
#endif
}
