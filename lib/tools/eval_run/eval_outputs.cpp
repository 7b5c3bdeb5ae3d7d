#include "tools/eval_run/eval_outputs.h"

#include <fstream>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/hdf5_columns.h"
#include "io/manifest.h"
#include "ops/kernel_choice.h"

namespace rqat::eval {

namespace {

std::map<std::string, std::string> problem_tags(const BenchmarkProblem& problem) {
  std::map<std::string, std::string> tags;
  if (!problem.subject.empty()) tags["subject"] = problem.subject;
  if (!problem.level.empty()) tags["level"] = problem.level;
  return tags;
}

io::Json prompt_json(const PromptOptions& p) {
  io::Json json;
  json["chat_template"] = p.use_chat_template
                              ? (p.chat_template_file.empty() ? "model" : p.chat_template_file)
                              : "none";
  json["system_prompt"] = p.system_prompt;
  json["instruction"] = p.instruction;
  json["enable_thinking"] = p.enable_thinking;
  return json;
}

void write_samples_jsonl(const std::filesystem::path& path, const EvalRunOptions& options,
                         const EvalRecords& records) {
  // The plain-text prompt (no chat template) has no system message.
  const std::string system =
      options.prompt.use_chat_template ? options.prompt.system_prompt : std::string();
  const auto& results = *records.results;
  io::write_file_atomically(path, [&](std::ostream& out) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const auto& grade = (*records.grades)[i];
      const auto& problem = (*records.problems)[r.request_index];
      io::Json row;
      row["id"] = problem.id;
      row["sample"] = r.sample_index;
      if (!problem.subject.empty()) row["subject"] = problem.subject;
      if (!problem.level.empty()) row["level"] = problem.level;
      row["prompt"] = (*records.prompts)[r.request_index];
      // The conversation before the chat template, so that `rqat traces` can turn samples into
      // training documents for any template (the rendered prompt is template-specific).
      row["system"] = system;
      row["user"] = build_user_message(problem.problem, options.prompt);
      row["completion"] = r.text;
      if (grade.prediction_answer.empty()) {
        row["extracted"] = nullptr;
      } else {
        row["extracted"] = grade.prediction_answer;
      }
      row["gold"] = problem.gold;
      row["correct"] = grade.kind == GradeKind::equal;
      row["grade"] = to_string(grade.kind);
      row["tokens"] = r.token_ids.size();
      row["finish_reason"] = enum_name(r.finish_reason);
      if (records.rewards) row["reward"] = (*records.rewards)[i];
      out << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  });
}

}  // namespace

io::Hdf5Columns results_columns(const EvalRunOptions& options, const EvalRecords& records) {
  const auto& results = *records.results;
  std::vector<int64_t> problem_index, sample_index, correct, tokens, truncated;
  std::vector<double> seconds;
  std::vector<std::string> ids, grade, finish_reason, extracted, gold;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const auto& g = (*records.grades)[i];
    const auto& problem = (*records.problems)[r.request_index];
    problem_index.push_back(static_cast<int64_t>(r.request_index));
    sample_index.push_back(r.sample_index);
    ids.push_back(problem.id);
    correct.push_back(g.kind == GradeKind::equal ? 1 : 0);
    grade.push_back(to_string(g.kind));
    tokens.push_back(static_cast<int64_t>(r.token_ids.size()));
    truncated.push_back(r.finish_reason == generation::FinishReason::kLength ? 1 : 0);
    finish_reason.emplace_back(enum_name(r.finish_reason));
    extracted.push_back(g.prediction_answer);
    gold.push_back(problem.gold);
    seconds.push_back(r.seconds);
  }
  io::Hdf5Columns h5;
  h5.add("samples/problem_index", std::move(problem_index));
  h5.add("samples/sample_index", std::move(sample_index));
  h5.add("samples/id", std::move(ids));
  h5.add("samples/correct", std::move(correct));
  h5.add("samples/grade", std::move(grade));
  h5.add("samples/tokens", std::move(tokens));
  h5.add("samples/truncated", std::move(truncated));
  h5.add("samples/finish_reason", std::move(finish_reason));
  h5.add("samples/extracted", std::move(extracted));
  h5.add("samples/gold", std::move(gold));
  h5.add("samples/seconds", std::move(seconds));
  if (records.rewards) h5.add("samples/reward", std::vector<double>(*records.rewards));
  h5.set_attribute("tool", "eval-math");
  h5.set_attribute("benchmark", options.benchmark.name);
  h5.set_attribute("model", options.model_dir.string());
  return h5;
}

std::vector<GradedSample> graded_samples(const EvalRecords& records) {
  std::vector<GradedSample> graded;
  const auto& results = *records.results;
  graded.reserve(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const auto& problem = (*records.problems)[r.request_index];
    GradedSample s;
    s.problem_id = problem.id;
    s.tags = problem_tags(problem);
    s.kind = (*records.grades)[i].kind;
    s.extracted = (*records.grades)[i].prediction_answer;
    s.tokens = static_cast<int64_t>(r.token_ids.size());
    s.truncated = r.finish_reason == generation::FinishReason::kLength;
    if (records.rewards) s.reward = (*records.rewards)[i];
    graded.push_back(std::move(s));
  }
  return graded;
}

io::Json model_quantization(const io::Artifact& model) {
  const io::Json& manifest = model.manifest;
  if (manifest.contains("config") && manifest["config"].contains("quant"))
    return manifest["config"]["quant"];
  const io::Json& config = model.config;
  if (config.contains("quantization_config")) return config["quantization_config"];
  return nullptr;
}

io::Json eval_config_json(const EvalRunOptions& options, const io::Artifact& model) {
  io::Json config;
  config["benchmark"] = options.benchmark.name;
  config["data"] = options.data_path.string();
  config["limit"] = options.limit;
  config["model"] = options.model_dir.string();
  config["quant"] = model_quantization(model);
  config["prompt"] = prompt_json(options.prompt);
  config["sampling"] = io::options_json(options.sampling);
  config["dtype"] = std::string(c10::toString(options.dtype));
  config["device"] = options.device.str();
  if (!options.record.options.is_null()) config["options"] = options.record.options;
  return config;
}

void write_eval_outputs(const EvalRunOptions& options, const io::Artifact& model,
                        const EvalRecords& records, const EvalSummary& summary,
                        const io::Hdf5Columns& results) {
  std::filesystem::create_directories(options.out_dir);
  write_samples_jsonl(options.out_dir / "samples.jsonl", options, records);
  results.write(options.out_dir / "results.h5");

  const io::Json config = eval_config_json(options, model);

  io::Json summary_file = config;
  summary_file["metrics"] = summary_json(summary);
  io::Json timing;
  timing["generation_seconds"] = records.generation_seconds;
  timing["generated_tokens"] = records.generated_tokens;
  timing["tokens_per_second"] =
      records.generation_seconds > 0 ? records.generated_tokens / records.generation_seconds : 0.0;
  timing["grading_seconds"] = records.grading_seconds;
  summary_file["timing"] = timing;
  io::write_text_atomically(options.out_dir / "summary.json", summary_file.dump(2) + "\n");

  io::Manifest manifest;
  manifest.tool = "eval-math";
  manifest.kernels = ops::kernel_choices_json();
  manifest.inputs["model"] = options.model_dir.string();
  manifest.inputs["data"] = options.data_path.string();
  manifest.config = config;
  manifest.metrics = metrics_json(summary.overall);
  io::write_manifest(options.out_dir, manifest);
}

}  // namespace rqat::eval
