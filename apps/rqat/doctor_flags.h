// Flags of `rqat doctor` (tools/doctor_command.h): the environment, every custom kernel's
// self-check and timing against its PyTorch twin, and an all-reduce, as a Markdown report. Exits 1
// when a check fails. Runs from its CLI11 callback like `rqat plan-memory`.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/runtime_flags.h"
#include "tools/doctor_command.h"

namespace rqat::cli {

inline void add_doctor_subcommand(CLI::App& app) {
  struct Flags {
    RuntimeFlags runtime;  // only --device is offered
    std::string report;
    bool no_timing = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check this machine for rqat: environment, each custom kernel against its PyTorch twin "
      "(verdict, worst error, timing), an all-reduce; a Markdown report for bug reports");
  cmd->add_option("--device", flags->runtime.device,
                  "Device to check: cpu, cuda, cuda:N or auto (the first GPU, else the CPU)")
      ->capture_default_str();
  cmd->add_option("--out", flags->report, "Also write the report to this Markdown file");
  cmd->add_flag("--no-timing", flags->no_timing, "Skip timing the kernels against their twins");
  cmd->callback([flags] {
    bool passed = false;
    const int code = run_tool("rqat doctor", [&] {
      tools::DoctorOptions options;
      options.device = flags->runtime.resolved_device();
      options.report = flags->report;
      options.timing = !flags->no_timing;
      passed = tools::run_doctor_command(options, std::cout);
    });
    if (code != 0) throw CLI::RuntimeError(code);
    if (!passed) {
      std::cerr << "rqat doctor: a check failed (see the report above)\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace rqat::cli
