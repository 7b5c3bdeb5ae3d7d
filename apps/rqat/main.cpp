// rqat: the experiment runner and model utilities (init-model, convert (also from llama2.c),
// logits, info, tokenize, generate), plan-memory and doctor. Each subcommand's flags are its
// declared configuration (lib/cli/rqat_*); this file only offers them and runs the subcommands.
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <type_traits>

#include "cli/option_flags.h"
#include "cli/rqat_doctor_config.h"
#include "cli/rqat_generate_config.h"
#include "cli/rqat_model_configs.h"
#include "cli/rqat_nll_config.h"
#include "cli/rqat_plan_memory_config.h"
#include "cli/rqat_report_config.h"
#include "cli/rqat_run_config.h"
#include "cli/rqat_sbatch_config.h"
#include "cli/rqat_status_config.h"
#include "cli/rqat_tiny_task_config.h"
#include "cli/rqat_traces_config.h"
#include "cli/runtime_flags.h"
#include "io/manifest.h"

namespace {

// The subcommand `name`, with the flags of `config`'s declaration.
template <class Config>
CLI::App* add_config_subcommand(CLI::App& app, const std::string& name,
                                const std::string& description, Config& config) {
  auto* cmd = app.add_subcommand(name, description);
  rqat::cli::add_config_flags(*cmd, config);
  return cmd;
}

// The same, run by `body` from its CLI11 callback, after parsing: an rqat::Error is printed as one
// line by run_tool, and a non-zero exit code (run_tool's, or one that `body` returns) reaches main
// through CLI::RuntimeError, which CLI11_PARSE returns silently.
template <class Config, class Body>
void add_running_subcommand(CLI::App& app, const std::string& name, const std::string& description,
                            Config& config, const char* tool, Body body) {
  add_config_subcommand(app, name, description, config)->callback([tool, body] {
    int status = 0;
    const int code = rqat::cli::run_tool(tool, [&] {
      if constexpr (std::is_void_v<std::invoke_result_t<Body>>) {
        body();
      } else {
        status = body();
      }
    });
    if (code != 0) throw CLI::RuntimeError(code);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{
      "rqat: quantize reasoning LLMs (PTQ, QAT with distillation, GRPO) and evaluate them"};
  app.require_subcommand(1);
  // A flag CLI11 rejects (an unknown name, a value that does not parse) is one line, like every
  // other error of the tools.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("rqat: error: {}\n", e.what());
  });

  // The model utilities run after parsing (below).
  rqat::cli::InitModelConfig init;
  auto* init_cmd = add_config_subcommand(
      app, "init-model", "Write a randomly initialized model directory from a config.json", init);
  rqat::cli::LogitsConfig logits;
  auto* logits_cmd = add_config_subcommand(
      app, "logits", "Compute logits for token ids stored in a safetensors file", logits);
  rqat::cli::ConvertConfig convert;
  auto* convert_cmd = add_config_subcommand(
      app, "convert",
      "Re-save a model directory in another dtype or shard size, or convert a llama2.c checkpoint",
      convert);
  rqat::cli::InfoConfig info;
  auto* info_cmd = add_config_subcommand(app, "info", "Describe a model directory", info);
  rqat::cli::TokenizeConfig tokenize;
  auto* tokenize_cmd = add_config_subcommand(
      app, "tokenize", "Print the token ids of each line of a file (- for stdin)", tokenize);
  rqat::cli::GenerateConfig generate;
  auto* generate_cmd =
      add_config_subcommand(app, "generate", "Sample continuations of a prompt", generate);

  // The others run from their callbacks.
  rqat::cli::ExperimentRunConfig run;
  add_running_subcommand(
      app, "run",
      "Run a YAML experiment: its stages as processes of the tools, skipping finished ones", run,
      "rqat run", [&] { return run.run(std::cout); });
  rqat::cli::NllConfig nll;
  add_running_subcommand(
      app, "nll", "Mean NLL and perplexity of a model on a text or JSONL file (no generation)", nll,
      "rqat", [&] { nll.run(std::cout); });
  rqat::cli::PlanMemoryConfig plan_memory;
  add_running_subcommand(
      app, "plan-memory",
      "Per-rank GPU memory of a qat-sft, qat-kd or grpo run (weights, "
      "gradients, optimizer, teacher, KV cache, activations) before launching it",
      plan_memory, "rqat plan-memory", [&] { plan_memory.run(std::cout, std::cerr); });
  rqat::cli::DoctorConfig doctor;
  add_running_subcommand(
      app, "doctor",
      "Check this machine for rqat: environment, each custom kernel against its PyTorch twin "
      "(verdict, worst error, timing), an all-reduce; a Markdown report for bug reports",
      doctor, "rqat doctor", [&] { return doctor.run(std::cout, std::cerr); });
  rqat::cli::RunReportConfig report;
  add_running_subcommand(
      app, "report",
      "Tables of a run (results per model and benchmark, stage status and metrics) as markdown "
      "and CSV; --plots draws its metrics with scripts/plot.py",
      report, "rqat report", [&] { report.run(std::cout); });
  rqat::cli::RunStatusConfig status;
  add_running_subcommand(
      app, "status",
      "Where every stage instance of a run is (finished, running with step/ETA/latest numbers, "
      "failed with its error, waiting on what), while `rqat run` or SLURM jobs write it",
      status, "rqat status", [&] { status.run(std::cout, isatty(STDOUT_FILENO) != 0); });
  rqat::cli::SbatchConfig sbatch;
  add_running_subcommand(
      app, "sbatch", "Write SLURM batch scripts for an experiment (one per stage), or submit them",
      sbatch, "rqat sbatch", [&] { sbatch.run(std::cout, std::cerr); });
  rqat::cli::TracesConfig traces;
  add_running_subcommand(
      app, "traces",
      "Turn eval-math samples.jsonl files into prompt/response training JSONL (teacher traces)",
      traces, "rqat", [&] { traces.run(std::cout); });
  rqat::cli::TinyTaskConfig tiny_task;
  add_running_subcommand(app, "tiny-task",
                         "Write the synthetic arithmetic word-problem task (train/test JSONL) and "
                         "a BPE tokenizer for it",
                         tiny_task, "rqat", [&] { tiny_task.run(std::cout); });

  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("rqat", [&] {
    if (*init_cmd) {
      init.run(std::cout);
    } else if (*logits_cmd) {
      logits.run();
    } else if (*convert_cmd) {
      convert.run(std::cout);
    } else if (*tokenize_cmd) {
      tokenize.run(std::cin, std::cout);
    } else if (*generate_cmd) {
      generate.run(std::cout);
    } else if (*info_cmd) {
      info.run(std::cout);
    }
  });
}
