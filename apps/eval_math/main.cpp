// eval-math: evaluates a model directory on a math reasoning benchmark (generation, answer
// extraction, grading, metrics), and `eval-math grade FILE` re-grades saved completions without a
// model. Flags only; the work is in lib/eval (docs/evaluation.md).
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>

#include "cli/engine_flags.h"
#include "cli/runtime_flags.h"
#include "eval/regrade.h"
#include "io/error.h"
#include "io/manifest.h"
#include "tools/eval_run/evaluate.h"
#include "tools/sample_reward.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{"eval-math: math reasoning benchmarks with answer extraction and grading"};
  rqat::eval::EvalRunOptions run;
  std::string model_dir, out_dir, benchmark = "math500", data, data_dir, protocol = "greedy";
  rqat::eval::FieldOverrides fields;
  rqat::eval::SamplingOverrides sampling;
  bool no_chat_template = false, disable_thinking = false, quiet = false;
  int64_t grade_timeout_ms = 2000;
  std::string reward;
  app.add_option("--model", model_dir, "Model directory to evaluate (Hugging Face layout)");
  app.add_option("--out", out_dir, "Output directory (samples.jsonl, summary.json, results.h5)");
  app.add_option("--benchmark", benchmark,
                 "math500, gsm8k, aime24, aime25, amc23, minerva_math, olympiadbench, or a name "
                 "for --data with --*-field flags")
      ->capture_default_str();
  app.add_option("--data", data, "Benchmark JSONL (default: DATA_DIR/BENCHMARK/test.jsonl)");
  app.add_option("--data-dir", data_dir,
                 "Folder of BENCHMARK/test.jsonl (default: $RQAT_DATA_DIR)");
  app.add_option("--limit", run.limit, "Evaluate the first N problems (0: all)")
      ->capture_default_str();
  app.add_option("--problem-field", fields.problem, "JSONL field of the problem");
  app.add_option("--answer-field", fields.answer, "JSONL field of the gold answer");
  app.add_option("--solution-field", fields.solution,
                 "JSONL field whose last \\boxed{} is the gold when the answer field is absent");
  app.add_option("--id-field", fields.id, "JSONL field of the problem id (default: line index)");
  app.add_option("--subject-field", fields.subject, "JSONL field for the per-subject breakdown");
  app.add_option("--level-field", fields.level, "JSONL field for the per-level breakdown");
  app.add_option("--protocol", protocol,
                 "greedy (n 1, temperature 0, 4096 tokens) or reasoning (n 8, temperature 0.6, "
                 "top-p 0.95, 32768 tokens); the flags below override it")
      ->capture_default_str();
  app.add_option("--n", sampling.n, "Samples per problem");
  app.add_option("--temperature", sampling.temperature, "Sampling temperature (0: greedy)");
  app.add_option("--top-p", sampling.top_p, "Nucleus sampling threshold");
  app.add_option("--top-k", sampling.top_k, "Top-k sampling (0: off)");
  app.add_option("--min-p", sampling.min_p, "Min-p sampling (0: off)");
  app.add_option("--max-new-tokens", sampling.max_new_tokens, "Generation budget per sample");
  app.add_option("--seed", sampling.seed, "Sampling seed (default 0)");
  app.add_option("--k", run.ks, "pass@k / maj@k values (default: 1, 2, 4, ..., n)");
  app.add_flag("--no-chat-template", no_chat_template,
               "Plain prompt \"PROBLEM\\nINSTRUCTION\\n\" instead of the chat template");
  app.add_option("--chat-template", run.prompt.chat_template_file,
                 "Placeholder chat template file (docs/chat_templates.md) instead of the model's");
  app.add_option("--system-prompt", run.prompt.system_prompt, "System message (default: none)");
  app.add_option("--instruction", run.prompt.instruction,
                 "Appended to each problem on a new line (\"\" for none)")
      ->capture_default_str();
  app.add_flag("--disable-thinking", disable_thinking, "Qwen3: enable_thinking=false");
  rqat::cli::add_engine_flags(app, run.engine);
  app.add_option("--grade-timeout-ms", grade_timeout_ms, "Time limit of one answer comparison")
      ->capture_default_str();
  app.add_option("--reward", reward,
                 "Also score each sample with a grpo reward spec and report the mean (e.g. "
                 "math_boxed+format_last_box, study A's score)");
  app.add_flag("--quiet", quiet, "No progress line");
  bool no_tensorboard = false;
  app.add_flag("--no-tensorboard", no_tensorboard,
               "Write no TensorBoard event files (default: OUT/tb, live)");
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);

  std::string graded_file, graded_out;
  std::vector<int> graded_ks;
  unsigned threads = 0;
  auto* grade_cmd = app.add_subcommand(
      "grade", "Re-grade saved completions: a JSONL with `completion` and `gold` on every line");
  grade_cmd->add_option("file", graded_file, "Per-sample JSONL")
      ->required()
      ->check(CLI::ExistingFile);
  grade_cmd->add_option(
      "--out", graded_out,
      "Where to write each line with `extracted` and `correct` (default: FILE.graded.jsonl)");
  grade_cmd->add_option("--threads", threads, "Grading threads (0: all cores)")
      ->capture_default_str();
  grade_cmd->add_option("--k", graded_ks, "pass@k / maj@k values (default: 1, 2, 4, ..., n)");

  CLI11_PARSE(app, argc, argv);
  int stopped_by_signal = 0;
  const int code = rqat::cli::run_tool("eval-math", [&] {
    if (*grade_cmd) {
      const std::filesystem::path out = graded_out.empty()
                                            ? rqat::eval::default_regrade_output(graded_file)
                                            : std::filesystem::path(graded_out);
      const auto summary = rqat::eval::regrade_file(graded_file, out, {}, threads, graded_ks);
      std::cout << rqat::eval::format_regrade_summary(summary) << "wrote " << out.string() << "\n";
      return;
    }
    if (model_dir.empty()) rqat::fail("--model is required (or use `eval-math grade FILE`)");
    if (out_dir.empty()) rqat::fail("--out is required");
    if (grade_timeout_ms < 1) rqat::fail("--grade-timeout-ms must be >= 1");
    run.model_dir = model_dir;
    run.out_dir = out_dir;
    run.benchmark = rqat::eval::resolve_benchmark(benchmark, !data.empty(), fields);
    run.data_path = rqat::eval::resolve_benchmark_data(data, data_dir, benchmark);
    run.prompt.use_chat_template = !no_chat_template;
    run.prompt.enable_thinking = !disable_thinking;
    run.sampling = rqat::eval::resolve_sampling(protocol, sampling);
    run.grade.timeout = std::chrono::milliseconds(grade_timeout_ms);
    if (!reward.empty()) run.reward = rqat::tools::sample_reward(reward);
    run.device = runtime.resolved_device();
    run.dtype = runtime.resolved_dtype();
    run.dequantize = runtime.dequantize;
    runtime.apply();
    run.show_progress = !quiet;
    run.tensorboard = !no_tensorboard;
    stopped_by_signal = rqat::eval::run_evaluation(run, std::cout).stopped_by_signal;
  });
  // Stopped by a signal with its finished samples on disk: 128 + the signal, as the trainers (the
  // SLURM script requeues on 138, SIGUSR1), and the next run continues.
  return code != 0 ? code : (stopped_by_signal != 0 ? 128 + stopped_by_signal : 0);
}
