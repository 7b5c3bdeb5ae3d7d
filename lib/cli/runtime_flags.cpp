// See runtime_flags.h.
#include "cli/runtime_flags.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <malloc.h>

#include <fmt/format.h>

#include <iostream>

#include "cli/option_flags.h"
#include "io/error.h"
#include "io/progress_file.h"

namespace rqat::cli {

c10::Device RuntimeFlags::resolved_device() const {
  if (device == "auto")
    return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (device == "cpu") return c10::kCPU;
  if (device == "cuda" || device.starts_with("cuda:")) {
    if (!torch::cuda::is_available()) fail("--device {}: no CUDA device is available", device);
    c10::Device d(device == "cuda" ? std::string("cuda:0") : device);
    if (d.index() >= static_cast<int>(torch::cuda::device_count())) {
      fail("--device {}: only {} CUDA devices", device, torch::cuda::device_count());
    }
    return d;
  }
  fail("--device '{}': expected cpu, cuda, cuda:N or auto", device);
}

at::ScalarType RuntimeFlags::resolved_dtype() const {
  if (dtype == "f32" || dtype == "float32") return at::kFloat;
  if (dtype == "bf16" || dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "auto") return resolved_device().is_cuda() ? at::kBFloat16 : at::kFloat;
  fail("--dtype '{}': expected f32, bf16 or auto", dtype);
}

ops::KernelMode RuntimeFlags::environment_kernel_mode() {
  try {
    return ops::kernel_mode_from_environment();
  } catch (const Error&) {
    return ops::KernelMode::kAuto;
  }
}

void RuntimeFlags::apply() const {
  if (threads > 0) at::set_num_threads(threads);
  ops::kernel_mode_from_environment();  // a bad $RQAT_KERNELS fails here, in one line
  ops::set_kernel_mode(kernels);
  ops::set_low_bit_activations(low_bit_activations);
}

void one_line_parse_errors(CLI::App& app) {
  // CLI11's own errors (an unknown flag, a bad enum name) in run_tool's one-line form.
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    std::string tool = failed->get_name();
    if (const auto slash = tool.rfind('/'); slash != std::string::npos) tool.erase(0, slash + 1);
    return fmt::format("{}: error: {}\n", tool.empty() ? "rqat" : tool, e.what());
  });
}

void add_runtime_flags(CLI::App& app, RuntimeFlags& flags) {
  one_line_parse_errors(app);
  add_option_flags(app, flags);
}

void return_large_allocations_to_system() { mallopt(M_MMAP_THRESHOLD, 1 << 20); }

namespace {

// An error is one line: a message that quotes a hostile file (a token or field with a line break
// or a terminal escape in it) shows those bytes escaped instead of breaking the line, and a
// message past 2000 bytes is cut.
std::string one_line(std::string_view message) {
  // A message quoting a huge field is cut: the line must stay readable.
  constexpr size_t kMaxMessageBytes = 2000;
  if (message.size() > kMaxMessageBytes)
    return one_line(message.substr(0, kMaxMessageBytes)) +
           fmt::format(" ... ({} bytes in all)", message.size());
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int run_tool(const char* tool, const std::function<void()>& body) {
  std::string message;
  try {
    body();
    return 0;
  } catch (const Error& e) {
    message = one_line(e.what());
  } catch (const c10::Error& e) {
    // Torch's messages can run over several lines; the first says what went wrong.
    const std::string what = e.what_without_backtrace();
    message = one_line(what.substr(0, what.find('\n')));
  } catch (const std::exception& e) {
    message = one_line(e.what());
  }
  std::cerr << tool << ": error: " << message << "\n";
  // `rqat status` shows the error of a stage that ran outside `rqat run` (SLURM).
  io::note_failure_in_progress(message);
  return 1;
}

}  // namespace rqat::cli
