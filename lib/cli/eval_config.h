// eval-math's configuration, declared once (io/options.h): every flag, its help and group, the
// record of the options in config.json and the settings part of the samples' fingerprint (what a
// resumed evaluation must share) derive from this (docs/evaluation.md). `eval-math grade` has its
// own, GradeConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/runtime_flags.h"
#include "eval/benchmark.h"
#include "eval/sampling_protocol.h"
#include "io/options.h"
#include "tools/eval_run/evaluate.h"

namespace rqat::cli {

struct EvalConfig {
  std::string model, out, benchmark = "math500", data, data_dir, protocol = "greedy";
  eval::FieldOverrides fields;
  eval::SamplingOverrides sampling;
  bool no_chat_template = false, disable_thinking = false, quiet = false, no_tensorboard = false;
  int64_t grade_timeout_ms = 2000;
  std::string reward;
  eval::EvalRunOptions run;  // limit, ks, prompt texts and the engine (sections below)
  RuntimeFlags runtime;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    io::heading(v, "Input and output");
    v.value(self.model, "model", "Model directory to evaluate (Hugging Face layout)");
    v.value(self.out, "out", "Output directory (samples.jsonl, summary.json, results.h5)",
            Role::kRunControl);
    io::heading(v, "Benchmark");
    v.value(self.benchmark, "benchmark",
            "math500, gsm8k, aime24, aime25, amc23, minerva_math, olympiadbench, or a name for "
            "--data with --*-field flags");
    v.value(self.data, "data", "Benchmark JSONL (default: DATA_DIR/BENCHMARK/test.jsonl)");
    v.value(self.data_dir, "data-dir", "Folder of BENCHMARK/test.jsonl (default: $RQAT_DATA_DIR)");
    // A resumed evaluation keeps its samples of the problems it shares with the new limit.
    v.value(self.run.limit, "limit", "Evaluate the first N problems (0: all)", Role::kRunControl);
    v.value(self.fields.problem, "problem-field", "JSONL field of the problem");
    v.value(self.fields.answer, "answer-field", "JSONL field of the gold answer");
    v.value(self.fields.solution, "solution-field",
            "JSONL field whose last \\boxed{} is the gold when the answer field is absent");
    v.value(self.fields.id, "id-field", "JSONL field of the problem id (default: line index)");
    v.value(self.fields.subject, "subject-field", "JSONL field for the per-subject breakdown");
    v.value(self.fields.level, "level-field", "JSONL field for the per-level breakdown");
    io::heading(v, "Sampling");
    v.value(self.protocol, "protocol",
            "greedy (n 1, temperature 0, 4096 tokens) or reasoning (n 8, temperature 0.6, top-p "
            "0.95, 32768 tokens); the flags below override it");
    // More or fewer samples per problem extend or cut the ones a resumed run has.
    v.value(self.sampling.n, "n", "Samples per problem", Role::kRunControl);
    v.value(self.sampling.temperature, "temperature", "Sampling temperature (0: greedy)");
    v.value(self.sampling.top_p, "top-p", "Nucleus sampling threshold");
    v.value(self.sampling.top_k, "top-k", "Top-k sampling (0: off)");
    v.value(self.sampling.min_p, "min-p", "Min-p sampling (0: off)");
    v.value(self.sampling.max_new_tokens, "max-new-tokens", "Generation budget per sample");
    v.value(self.sampling.seed, "seed", "Sampling seed (default 0)");
    // Scores are computed from the samples: another k, grader limit or reward rescores them.
    v.value(self.run.ks, "k", "pass@k / maj@k values (default: 1, 2, 4, ..., n)",
            Role::kRunControl);
    io::heading(v, "Prompt");
    v.value(self.no_chat_template, "no-chat-template",
            "Plain prompt \"PROBLEM\\nINSTRUCTION\\n\" instead of the chat template");
    v.value(self.run.prompt.chat_template_file, "chat-template",
            "Placeholder chat template file (docs/chat_templates.md) instead of the model's");
    v.value(self.run.prompt.system_prompt, "system-prompt", "System message (default: none)");
    v.value(self.run.prompt.instruction, "instruction",
            "Appended to each problem on a new line (\"\" for none)");
    v.value(self.disable_thinking, "disable-thinking", "Qwen3: enable_thinking=false");
    io::section(v, "Generation engine", self.run.engine);
    io::heading(v, "Grading and output");
    v.value(self.grade_timeout_ms, "grade-timeout-ms", "Time limit of one answer comparison",
            Role::kRunControl);
    v.value(self.reward, "reward",
            "Also score each sample with a grpo reward spec and report the mean (e.g. "
            "math_boxed+format_last_box, study A's score)",
            Role::kRunControl);
    v.value(self.quiet, "quiet", "No progress line", Role::kRunControl);
    v.value(self.no_tensorboard, "no-tensorboard",
            "Write no TensorBoard event files (default: OUT/tb, live)", Role::kRunControl);
    io::section(v, "Runtime", self.runtime);
  }

  // The run's options (errors name the flag); also applies the runtime flags.
  eval::EvalRunOptions resolve() const;
};

// `eval-math grade FILE`: re-grades saved completions without a model.
struct GradeConfig {
  std::string file, out;
  unsigned threads = 0;
  std::vector<int> ks;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.file, "file", "Per-sample JSONL", Role::kSetting,
            {.required = true, .positional = true});
    v.value(self.out, "out",
            "Where to write each line with `extracted` and `correct` (default: "
            "FILE.graded.jsonl)",
            Role::kRunControl);
    v.value(self.threads, "threads", "Grading threads (0: all cores)", Role::kRunControl);
    v.value(self.ks, "k", "pass@k / maj@k values (default: 1, 2, 4, ..., n)");
  }

  // Grades the file and prints its summary to `out`.
  void run(std::ostream& log) const;
};

}  // namespace rqat::cli
