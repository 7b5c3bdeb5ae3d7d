// See doctor_command.h. The report is assembled as Markdown text, section by section, in the order
// the checks run, so that a check that crashes the process leaves the sections before it printed.
#include "tools/doctor_command.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/headeronly/version.h>

#include <chrono>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/manifest.h"
#include "ops/cpu_target.h"
#include "ops/kernel_choice.h"
#include "tools/all_reduce_check.h"
#include "tools/decode_graph_check.h"
#include "tools/kernel_timing.h"
#include "train/distributed.h"

#ifdef RQAT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#endif

namespace rqat::tools {

namespace {

std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1 << 30)); }

// "| a | b |" rows of the environment table.
std::string environment(const c10::Device& device) {
  std::string t = "## Environment\n\n| item | value |\n| --- | --- |\n";
  const auto row = [&t](std::string_view item, const std::string& value) {
    t += fmt::format("| {} | {} |\n", item, value);
  };
  row("checked on", ops::device_description(device));
  row("rqat revision", io::build_git_revision());
  row("torch (LibTorch)",
      fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH));
  const bool gpu = torch::cuda::is_available();
  row("GPUs visible", gpu ? std::to_string(torch::cuda::device_count()) : "none");
#ifdef RQAT_WITH_CUDA
  row("rqat's CUDA kernels", "in this build");
  const long torch_cuda = at::detail::getCUDAHooks().versionCUDART();
  row("torch built with CUDA", torch_cuda > 0 ? cuda_version(static_cast<int>(torch_cuda)) : "?");
  if (gpu) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    row("CUDA driver (supports up to)", cuda_version(driver));
    row("CUDA runtime", cuda_version(runtime));
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
      row(fmt::format("GPU {}", i),
          fmt::format("{}, compute capability {}.{}, {} SMs, {}", p->name, p->major, p->minor,
                      p->multiProcessorCount, gib(static_cast<double>(p->totalGlobalMem))));
    }
    if (device.is_cuda()) {
      size_t free = 0, total = 0;
      cudaSetDevice(device.has_index() ? device.index() : 0);
      cudaMemGetInfo(&free, &total);
      row("free memory",
          fmt::format("{} of {}", gib(static_cast<double>(free)), gib(static_cast<double>(total))));
    }
  }
#else
  row("rqat's CUDA kernels", "not in this build (nvcc was not found at build time)");
#endif
  const std::string nccl = train::nccl_version();
  row("NCCL", nccl.empty() ? "not in this build" : nccl);
  row("CPU threads", std::to_string(at::get_num_threads()));
  const char* mode = std::getenv("RQAT_KERNELS");
  row("kernel mode", fmt::format("{} ($RQAT_KERNELS {})", enum_name(ops::kernel_mode()),
                                 mode && *mode ? fmt::format("= {}", mode) : "unset"));
  const char* target = std::getenv("RQAT_CPU_TARGET");
  row("CPU target", fmt::format("{} ($RQAT_CPU_TARGET {}): the packed low-bit kernels' code",
                                ops::cpu_target_description(),
                                target && *target ? fmt::format("= {}", target) : "unset"));
  return t;
}

struct Verdicts {
  int passed = 0;
  std::vector<std::string> failed;
};

std::string check_row(ops::Kernel kernel, const ops::KernelCheck& c, Verdicts& verdicts) {
  const std::string name(enum_name(kernel));
  if (c.passed) {
    ++verdicts.passed;
  } else {
    verdicts.failed.push_back(name);
  }
  const std::string error = !c.failure.empty() ? "threw: " + c.failure
                            : c.tolerance == 0 && c.worst_error == 0
                                ? "0 (bit-exact)"
                                : fmt::format("{:.3g}", c.worst_error);
  return fmt::format("| {} | {} | {} | {:.3g} | {} | {} | {:.2f} s |\n", name,
                     c.passed ? "ok" : "**FAILED**", error, c.tolerance, c.worst_case, c.cases,
                     c.seconds);
}

std::string timing_row(const KernelTiming& t) {
  if (!t.error.empty())
    return fmt::format("| {} | {} | | | threw: {} |\n", enum_name(t.kernel), t.shape, t.error);
  return fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.2f}x |\n", enum_name(t.kernel), t.shape,
                     t.custom_ms, t.twin_ms, t.twin_ms / std::max(t.custom_ms, 1e-9));
}

std::string all_reduce_section(const AllReduceCheck& a, Verdicts& verdicts) {
  std::string s = "## All-reduce\n\n";
  if (a.skipped) return s + fmt::format("Skipped: {}.\n", a.detail);
  if (a.passed) {
    ++verdicts.passed;
  } else {
    verdicts.failed.push_back("all-reduce");
  }
  s += "| backend | ranks | float32 per rank | result | time | bus bandwidth |\n"
       "| --- | --- | --- | --- | --- | --- |\n";
  s += a.passed ? fmt::format("| {} | {} | {} | ok: exact sum | {:.3f} ms | {:.2f} GB/s |\n",
                              a.backend, a.ranks, a.elements, a.ms, a.bus_gbps)
                : fmt::format("| {} | {} | {} | **FAILED**: {} | | |\n", a.backend, a.ranks,
                              a.elements, a.detail);
  return s;
}

}  // namespace

bool run_doctor_command(const DoctorOptions& options, std::ostream& out) {
  const c10::Device device = options.device;
  const c10::DeviceGuard on_device(device);  // cuda:N: every check and timing on that GPU
  std::string report;
  // Sections apart by one blank line, each ending with its newline.
  const auto emit = [&](std::string section) {
    if (!section.ends_with('\n')) section += '\n';
    report += section + "\n";
    out << section << "\n" << std::flush;
  };
  emit(fmt::format(
      "# rqat doctor\n\n{:%Y-%m-%d %H:%M} UTC, device {}.",
      fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())),
      device.str()));
  emit(environment(device));
  if (!device.is_cuda()) {
    emit(torch::cuda::is_available()
             ? "The CPU was asked for: every check below runs rqat's CPU paths."
             : "No GPU: torch sees no CUDA device, so every check below runs rqat's CPU paths "
               "(the CUDA kernels are not checked).");
  }

  Verdicts verdicts;
  std::string checks = fmt::format(
      "## Self-checks on {}\n\nEach custom kernel against its PyTorch twin, as at first use "
      "(ops/kernel_choice.h); the error in the kernel's test measure.\n\n"
      "| kernel | verdict | worst error | tolerance | worst case | cases | time |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n",
      device.str());
  std::vector<KernelTiming> timings;
  for (size_t i = 0; i < static_cast<size_t>(ops::Kernel::kCount); ++i) {
    const auto kernel = static_cast<ops::Kernel>(i);
    if (!ops::custom_kernel_exists(kernel, device)) continue;
    if (kernel == ops::Kernel::kCudaGraphs) {
      const DecodeGraphCheck graphs = check_decode_graphs(device);
      checks += check_row(kernel, graphs.check, verdicts);
      timings.push_back(graphs.timing);
    } else if (const auto check = ops::run_kernel_self_check(kernel, device)) {
      checks += check_row(kernel, *check, verdicts);
    }
  }
  emit(checks);

  if (options.timing) {
    const auto measured = time_kernels(device);
    timings.insert(timings.begin(), measured.begin(), measured.end());
    std::string t = fmt::format(
        "## Custom kernels against their twins on {}\n\nMilliseconds per call (the device "
        "synchronized); speedup = twin / custom.\n\n"
        "| kernel | what | custom ms | twin ms | speedup |\n| --- | --- | --- | --- | --- |\n",
        device.str());
    for (const auto& timing : timings) t += timing_row(timing);
    emit(t);
  }

  emit(all_reduce_section(check_all_reduce(device), verdicts));

  emit(verdicts.failed.empty()
           ? fmt::format("**All {} checks passed.**", verdicts.passed)
           : fmt::format("**{} of {} checks FAILED: {}.** In the default --kernels auto the "
                         "failed kernels fall back to their twins; attach this report to a bug "
                         "report.",
                         verdicts.failed.size(), verdicts.passed + verdicts.failed.size(),
                         fmt::join(verdicts.failed, ", ")));
  if (!options.report.empty()) io::write_text_atomically(options.report, report);
  return verdicts.failed.empty();
}

}  // namespace rqat::tools
