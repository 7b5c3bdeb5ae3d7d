// Decode attention over a paged KV cache on CUDA: the flash-decoding kernel
// (cuda/paged_decode_attention.cu) against its peer, the ATen reference (gather, matmul, softmax,
// matmul) on the same data. Default shape: Qwen3-0.6B's attention (16 query heads, 8 kv heads,
// head_dim 128, bf16) with block size 16 and 8,192 cached positions per sequence. Per batch size:
// milliseconds per call (CUDA events over --iters calls after --warmup), the bytes a decode step
// must read (every sequence's keys and values, q, out, block tables and lengths), GB/s, the
// fraction of the GPU's peak memory bandwidth, and the ratio reference / kernel (> 1: kernel
// faster). Lines starting with "RESULT " are for scripts. Without CUDA it says so and exits 0.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#ifdef RQAT_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "cuda/paged_decode_attention.cuh"
#endif
#include "io/error.h"
#include "ops/paged_attention.h"

#ifdef RQAT_WITH_CUDA
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) rqat::fail("{}: {}", what, cudaGetErrorString(err));
}

// Milliseconds per call of fn on the current stream: `warmup` calls, then `iters` calls between
// two CUDA events (back to back, as decode steps of consecutive layers run).
template <class Fn>
double time_cuda_ms(int warmup, int iters, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) fn();
  check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / iters;
}

// Peak DRAM bandwidth in GB/s from the device attributes: two transfers per memory clock (DDR) on
// a bus of the given width. The formula of NVIDIA's bandwidthTest and the CUDA guide; for HBM3e
// parts the reported clock may not match the marketed figure, hence --peak-gbps.
double device_peak_gbps(std::string& how) {
  int device = 0, clock_khz = 0, bus_bits = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device),
             "cudaDeviceGetAttribute(MemoryClockRate)");
  check_cuda(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device),
             "cudaDeviceGetAttribute(GlobalMemoryBusWidth)");
  const double gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  how = fmt::format(
      "2 x memory clock {} kHz x 1e3 x bus {} bits / 8 = {:.1f} GB/s "
      "(cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth)",
      clock_khz, bus_bits, gbps);
  return gbps;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  CLI::App app{"rqat paged decode attention benchmark: CUDA kernel vs ATen reference, GB/s"};
  int64_t context = 8192, block_size = 16, heads = 16, kv_heads = 8, head_dim = 128;
  std::vector<int64_t> batches{16, 64, 128};
  std::string dtype_name = "bf16";
  int warmup = 10, iters = 100, ref_iters = 10;
  double peak_override = 0;
  bool skip_ref = false;
  app.add_option("--context", context, "Cached positions per sequence")->capture_default_str();
  app.add_option("--batch", batches, "Batch sizes, one line each")->capture_default_str();
  app.add_option("--block-size", block_size, "Positions per KV cache block")->capture_default_str();
  app.add_option("--heads", heads, "Query heads")->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "Key/value heads")->capture_default_str();
  app.add_option("--head-dim", head_dim, "Head size")->capture_default_str();
  app.add_option("--dtype", dtype_name, "bf16, f16 or f32")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed calls first")->capture_default_str();
  app.add_option("--iters", iters, "Timed kernel calls")->capture_default_str();
  app.add_option("--ref-iters", ref_iters, "Timed reference calls")->capture_default_str();
  app.add_option("--peak-gbps", peak_override,
                 "Peak memory bandwidth in GB/s (0: from the device attributes)")
      ->capture_default_str();
  app.add_flag("--skip-ref", skip_ref, "Do not time the ATen reference");
  CLI11_PARSE(app, argc, argv);
#ifndef RQAT_WITH_CUDA
  (void)skip_ref;
  std::cout << "bench_paged_attention: rqat was built without CUDA kernels; nothing to measure\n";
  return 0;
#else
  if (!torch::cuda::is_available()) {
    std::cout << "bench_paged_attention: no CUDA device on this machine; nothing to measure\n";
    return 0;
  }
  try {
    const at::ScalarType dtype = dtype_name == "bf16"  ? at::kBFloat16
                                 : dtype_name == "f16" ? at::kHalf
                                 : dtype_name == "f32" ? at::kFloat
                                                       : at::kByte;
    if (dtype == at::kByte) rqat::fail("--dtype {} (supported: bf16, f16, f32)", dtype_name);
    if (context < 1 || block_size < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 ||
        warmup < 0 || iters < 1 || ref_iters < 1)
      rqat::fail("need context, block size, heads >= 1, heads a multiple of kv heads, iters >= 1");
    std::string how;
    const double device_gbps = device_peak_gbps(how);
    const double peak_gbps = peak_override > 0 ? peak_override : device_gbps;
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    std::cout << fmt::format(
        "device {}: {} SMs; peak bandwidth {}{}\n", prop.name, prop.multiProcessorCount, how,
        peak_override > 0 ? fmt::format("; overridden: {} GB/s", peak_override) : std::string());
    const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t blocks_per_seq = (context + block_size - 1) / block_size;
    const double scale = 0;  // 1/sqrt(head_dim)
    for (const int64_t batch : batches) {
      at::manual_seed(1);
      const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
      const int64_t num_blocks = batch * blocks_per_seq;
      auto q = at::randn({batch, heads, head_dim}, opts);
      auto key_pool = at::randn({num_blocks, block_size, kv_heads, head_dim}, opts);
      auto value_pool = at::randn({num_blocks, block_size, kv_heads, head_dim}, opts);
      // Blocks in random order, as a cache that has served many requests hands them out.
      const auto int_opts = at::TensorOptions().device(at::kCUDA).dtype(at::kInt);
      auto block_tables = at::randperm(num_blocks, int_opts.dtype(at::kLong))
                              .view({batch, blocks_per_seq})
                              .to(at::kInt);
      auto lens = at::full({batch}, context, int_opts);
      if (!rqat::ops::paged_decode_kernel_supported(q, key_pool))
        rqat::fail("no kernel for head_dim {} and {}", head_dim, dtype_name);

      // The kernel alone through its launcher, with the output and workspace allocated once.
      auto out = at::empty_like(q);
      const size_t ws_bytes = rqat::cuda::paged_decode_workspace_bytes(batch, heads, head_dim,
                                                                       blocks_per_seq, block_size);
      auto workspace = at::empty({static_cast<int64_t>(ws_bytes)}, opts.dtype(at::kByte));
      rqat::cuda::PagedDecodeArgs args;
      args.q = q.data_ptr();
      args.key_pool = key_pool.data_ptr();
      args.value_pool = value_pool.data_ptr();
      args.block_tables = block_tables.data_ptr<int32_t>();
      args.context_lens = lens.data_ptr<int32_t>();
      args.out = out.data_ptr();
      args.workspace = workspace.data_ptr();
      args.batch = batch;
      args.heads = heads;
      args.kv_heads = kv_heads;
      args.head_dim = head_dim;
      args.block_size = block_size;
      args.max_blocks = blocks_per_seq;
      args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
      args.dtype = dtype == at::kBFloat16 ? rqat::cuda::PagedDType::kBF16
                   : dtype == at::kHalf   ? rqat::cuda::PagedDType::kF16
                                          : rqat::cuda::PagedDType::kF32;
      const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
      const double kernel_ms = time_cuda_ms(warmup, iters, [&] {
        const int err = rqat::cuda::launch_paged_decode_attention(args, stream);
        if (err != 0)
          rqat::fail("paged decode kernel: {}", cudaGetErrorString(static_cast<cudaError_t>(err)));
      });

      const double bytes =
          static_cast<double>(batch * context * kv_heads * head_dim * 2 * elem)  // keys + values
          + static_cast<double>(2 * batch * heads * head_dim * elem)             // q, out
          + static_cast<double>(batch * blocks_per_seq * 4 + batch * 4);         // tables, lens
      const double gbps = bytes / (kernel_ms * 1e-3) / 1e9;
      // The entry point (what the model calls) must agree with the reference on this data.
      auto ref = rqat::ops::paged_decode_attention_ref(q, key_pool, value_pool, block_tables, lens,
                                                       scale, context);
      const double max_diff =
          (rqat::ops::paged_decode_attention(q, key_pool, value_pool, block_tables, lens, scale)
               .to(at::kFloat) -
           ref.to(at::kFloat))
              .abs()
              .max()
              .item<double>();
      double ref_ms = 0;
      if (!skip_ref) {
        ref_ms = time_cuda_ms(1, ref_iters, [&] {
          rqat::ops::paged_decode_attention_ref(q, key_pool, value_pool, block_tables, lens, scale,
                                                context);
        });
      }
      std::cout << fmt::format(
          "batch {} context {} heads {}/{} head_dim {} {} block {}: kernel {:.4f} ms, {:.3f} GB "
          "read, {:.1f} GB/s = {:.1f}% of {:.1f} GB/s peak; reference {:.4f} ms ({:.2f}x); "
          "max |kernel - reference| {:.3g}\n",
          batch, context, heads, kv_heads, head_dim, dtype_name, block_size, kernel_ms, bytes / 1e9,
          gbps, 100 * gbps / peak_gbps, peak_gbps, ref_ms, skip_ref ? 0.0 : ref_ms / kernel_ms,
          max_diff);
      std::cout << fmt::format(
          "RESULT paged_decode batch={} context={} heads={} kv_heads={} head_dim={} dtype={} "
          "block_size={} ms={:.5f} gbps={:.1f} peak_gbps={:.1f} peak_fraction={:.4f} ref_ms={:.5f} "
          "ref_ratio={:.3f} max_abs_diff={:.3g}\n",
          batch, context, heads, kv_heads, head_dim, dtype_name, block_size, kernel_ms, gbps,
          peak_gbps, gbps / peak_gbps, ref_ms, skip_ref ? 0.0 : ref_ms / kernel_ms, max_diff);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_paged_attention: " << e.what() << "\n";
    return 1;
  }
  return 0;
#endif
}
