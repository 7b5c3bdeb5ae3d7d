// The eval-math run: a model directory on a benchmark. Each problem is rendered with the model's
// chat template and the instruction, sampled n times by the generation engine, graded, and
// summarized; the outputs (docs/evaluation.md) are samples.jsonl, summary.json, results.h5 and
// manifest.json in the output directory, and a console table.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/benchmark.h"
#include "eval/grader.h"
#include "eval/prompts.h"
#include "eval/sample_summary.h"
#include "eval/sampling_protocol.h"
#include "generation/generation_engine.h"
#include "io/options.h"

namespace rqat::model {
class CausalLM;
}

namespace rqat::eval {

// A score of each sample besides correctness, e.g. study A's reward (correct boxed answer + 0.1
// for the format). eval sits below rl, so the caller supplies it (eval-math --reward builds it
// from rl::make_reward); score() is called from one thread.
struct SampleReward {
  std::string spec;  // its name in summaries ("" = no reward)
  std::function<double(const std::string& completion, const std::string& gold, bool truncated)>
      score;
};

struct EvalRunOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  BenchmarkSpec benchmark;  // name and fields
  std::filesystem::path data_path;
  std::size_t limit = 0;  // first N problems (0: all)
  PromptOptions prompt;
  SamplingSettings sampling;
  std::vector<int> ks;               // pass@k / maj@k (empty: 1, 2, 4, ..., n)
  generation::EngineOptions engine;  // batch size and KV budget (show_progress is set below)
  unsigned grade_threads = 0;        // 0: all cores
  GradeOptions grade;
  SampleReward reward;  // none by default
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::kCPU;
  bool dequantize = false;  // GPTQ checkpoints: dequantize at load (default: packed kernels)
  bool show_progress = true;
  bool tensorboard = true;  // OUT/tb event files (tools/eval_run/eval_tensorboard.h)
  // OUT/progress.json for `rqat status`, and OUT/samples.partial.jsonl, from which a killed run
  // continues (tools/eval_run/partial_samples.h). Off for the trainers' in-memory evaluations.
  bool stage_files = true;
  // An already loaded model to evaluate instead of loading model_dir's weights (model_dir still
  // gives the tokenizer and chat template): the trainers evaluate their student in memory.
  model::CausalLM* model = nullptr;
  // eval-math's declared options as given (cli/eval_config.h): config.json records them all, the
  // samples' fingerprint their settings. Null for the trainers' evaluations.
  io::OptionsRecord record;
};

// The trainers' periodic eval-math: greedy decoding of the first `limit` problems of `benchmark`
// (a built-in name, or any name with a `data` file; data from `data` or $RQAT_DATA_DIR) with an
// in-memory model whose tokenizer and chat template are model_dir's. Writes the usual outputs to
// out_dir and prints nothing.
EvalSummary evaluate_model_in_memory(model::CausalLM& model, const std::filesystem::path& model_dir,
                                     const std::string& benchmark, const std::string& data,
                                     int64_t limit, int64_t max_new_tokens,
                                     const PromptOptions& prompt, c10::Device device,
                                     const std::filesystem::path& out_dir);

// Runs the evaluation, writes the outputs and prints the tables to `out`; returns the summary.
EvalSummary run_evaluation(const EvalRunOptions& options, std::ostream& out);

}  // namespace rqat::eval
