// What an evaluation run writes into its output directory (docs/evaluation.md):
//   samples.jsonl  one line per sample: id, sample, subject/level, prompt, system, user,
//                  completion, extracted, gold, correct, grade, tokens, finish_reason (re-gradable
//                  by `eval-math grade`; `rqat traces` turns them into training data)
//   results.h5     the same per-sample results as HDF5 columns
//   summary.json   benchmark, model, quantization, prompt and sampling settings, metrics, timing
//   manifest.json  the artifact manifest (tool, args, inputs, config, git revision, metrics)
#pragma once

#include <vector>

#include "eval/benchmark.h"
#include "eval/grader.h"
#include "eval/sample_summary.h"
#include "generation/generation_engine.h"
#include "io/hdf5_columns.h"
#include "io/json_file.h"
#include "tools/eval_run/evaluate.h"

namespace rqat::eval {

// Views of one run's data; results and grades are parallel and ordered like the engine's output.
struct EvalRecords {
  const std::vector<BenchmarkProblem>* problems = nullptr;
  const std::vector<std::string>* prompts = nullptr;  // one per problem
  const std::vector<generation::GenerationResult>* results = nullptr;
  const std::vector<GradeResult>* grades = nullptr;
  const std::vector<double>* rewards = nullptr;  // parallel to results, when a reward is set
  double generation_seconds = 0;
  int64_t generated_tokens = 0;
  double grading_seconds = 0;
};

std::vector<GradedSample> graded_samples(const EvalRecords& records);

// The quantization a model directory carries: its manifest's config.quant (written by ptq and
// the QAT tools), else config.json's quantization_config, else null (full precision).
io::Json model_quantization(const io::Artifact& model);

// The settings that made the run (summary.json and the manifest's config): benchmark, data, limit,
// model, quantization, prompt, sampling, dtype, device.
io::Json eval_config_json(const EvalRunOptions& options, const io::Artifact& model);

// results.h5's columns: samples/<field>, one row per sample in (problem, sample) order.
io::Hdf5Columns results_columns(const EvalRunOptions& options, const EvalRecords& records);

// samples.jsonl, results.h5 (`results`: results_columns of these records), summary.json and the
// manifest.
void write_eval_outputs(const EvalRunOptions& options, const io::Artifact& model,
                        const EvalRecords& records, const EvalSummary& summary,
                        const io::Hdf5Columns& results);

}  // namespace rqat::eval
