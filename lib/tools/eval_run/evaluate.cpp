#include "tools/eval_run/evaluate.h"

#include <sstream>

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <optional>
#include <ostream>

#include "chat/chat_template.h"
#include "generation/generation_engine.h"
#include "io/error.h"
#include "io/progress_file.h"
#include "io/stop_request.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "ops/kernel_choice.h"
#include "quant/load_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/eval_run/eval_outputs.h"
#include "tools/eval_run/eval_tensorboard.h"
#include "tools/eval_run/partial_samples.h"

namespace rqat::eval {

namespace {

std::vector<std::string> render_prompts(const std::vector<BenchmarkProblem>& problems,
                                        const EvalRunOptions& options, const io::Artifact& model,
                                        bool& add_special_tokens) {
  std::vector<std::string> texts;
  texts.reserve(problems.size());
  for (const auto& p : problems) texts.push_back(p.problem);
  return render_problem_prompts(texts, options.prompt, model, add_special_tokens);
}

}  // namespace

namespace {

// A stamp of a file: its size and modification time (a retrained model or an edited data file
// at the same path is not the one the kept samples came from).
io::Json file_stamp(const std::filesystem::path& file) {
  std::error_code error;
  const auto size = std::filesystem::file_size(file, error);
  if (error) return nullptr;
  const auto time = std::filesystem::last_write_time(file, error);
  return {{"size", size}, {"mtime", error ? 0 : time.time_since_epoch().count()}};
}

// What the samples depend on (partial_samples.h): the settings without --limit and --n, the
// model's weights and config, the data file, and the kernels' arithmetic.
io::Json samples_fingerprint(const EvalRunOptions& options, const io::Artifact& artifact) {
  io::Json fingerprint = eval_config_json(options, artifact);
  fingerprint.erase("limit");
  fingerprint["sampling"].erase("n");
  // The declared settings, not every option: --limit, --n, --k and the like may change.
  fingerprint.erase("options");
  if (!options.record.settings.is_null()) fingerprint["options"] = options.record.settings;
  io::Json model = io::Json::object();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options.model_dir, error)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" || name == "config.json")
      model[name] = file_stamp(entry.path());
  }
  fingerprint["model_files"] = model;
  fingerprint["data_file"] = file_stamp(options.data_path);
  const auto kernels = ops::kernel_choices_json();
  fingerprint["kernels"] = {{"mode", kernels.at("mode")},
                            {"low_bit_activations", kernels.at("low_bit_activations")}};
  return fingerprint;
}

// One request per problem for the samples not kept from an earlier run; request_problem maps
// each request back to its problem.
std::vector<generation::GenerationRequest> missing_sample_requests(
    const std::vector<generation::GenerationRequest>& all,
    const std::vector<BenchmarkProblem>& problems, const PartialSamples* kept,
    std::vector<size_t>& request_problem) {
  std::vector<generation::GenerationRequest> requests;
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<int> missing;
    for (int s = 0; s < all[i].num_samples; ++s)
      if (!kept || !kept->find(problems[i].id, s)) missing.push_back(s);
    if (missing.empty()) continue;
    requests.push_back(all[i]);
    if (static_cast<int>(missing.size()) < all[i].num_samples)
      requests.back().sample_indices = std::move(missing);
    request_problem.push_back(i);
  }
  return requests;
}

// Every sample in (problem, sample) order: kept ones and the ones generated now.
std::vector<generation::GenerationResult> merged_results(
    const std::vector<generation::GenerationRequest>& all,
    const std::vector<BenchmarkProblem>& problems, const PartialSamples* kept,
    std::vector<generation::GenerationResult> generated,
    const std::vector<size_t>& request_problem) {
  std::map<std::pair<size_t, int>, generation::GenerationResult> by_sample;
  for (auto& r : generated) {
    r.request_index = request_problem[r.request_index];
    by_sample[{r.request_index, r.sample_index}] = std::move(r);
  }
  std::vector<generation::GenerationResult> results;
  for (size_t i = 0; i < all.size(); ++i) {
    for (int s = 0; s < all[i].num_samples; ++s) {
      const auto it = by_sample.find({i, s});
      if (it != by_sample.end()) {
        results.push_back(std::move(it->second));
        continue;
      }
      results.push_back(*kept->find(problems[i].id, s));
      results.back().request_index = i;
    }
  }
  return results;
}

}  // namespace

EvalSummary run_evaluation(const EvalRunOptions& options, std::ostream& out) {
  if (options.out_dir.empty()) fail("--out is required");
  if (options.engine.max_batch < 1)
    fail("--max-batch must be >= 1, got {}", options.engine.max_batch);
  auto problems = load_benchmark(options.data_path, options.benchmark);
  if (options.limit > 0 && options.limit < problems.size()) problems.resize(options.limit);
  if (problems.empty()) fail("{}: no problems to evaluate", options.data_path.string());
  for (int k : options.ks)
    if (k < 1 || k > options.sampling.n)
      fail("--k {} must be within 1..--n ({})", k, options.sampling.n);

  // The model directory, read once: its tokenizer, chat template, config and manifest.
  const io::Artifact artifact = io::Artifact::open(options.model_dir);
  auto tokenizer = tokenizer::Tokenizer::load(artifact);
  bool add_special_tokens = true;
  const auto prompts = render_prompts(problems, options, artifact, add_special_tokens);
  std::shared_ptr<model::CausalLM> loaded;
  if (!options.model)
    loaded = quant::load_model(
        artifact, model::LoadOptions{options.dtype, options.device, options.dequantize});
  model::CausalLM* model = options.model ? options.model : loaded.get();

  const auto stop_token_ids = model::model_stop_token_ids(model->config());
  std::vector<generation::GenerationRequest> all_requests(problems.size());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    auto& request = all_requests[i];
    for (const auto id : tokenizer->encode(prompts[i], add_special_tokens))
      request.prompt_ids.push_back(id);
    request.num_samples = options.sampling.n;
    request.seed = problem_seed(options.sampling.seed, problems[i].id);
    request.params.temperature = options.sampling.temperature;
    request.params.top_p = options.sampling.top_p;
    request.params.top_k = options.sampling.top_k;
    request.params.min_p = options.sampling.min_p;
    request.params.max_new_tokens = options.sampling.max_new_tokens;
    request.params.stop_token_ids = stop_token_ids;
  }

  out << fmt::format("eval-math: {} problems x {} samples of {} ({}) with {}\n", problems.size(),
                     options.sampling.n, options.benchmark.name, options.data_path.string(),
                     options.model_dir.string());
  const int64_t total_samples = static_cast<int64_t>(problems.size()) * options.sampling.n;
  std::optional<PartialSamples> kept;
  std::optional<io::ProgressFile> progress;
  if (options.stage_files) {
    std::filesystem::create_directories(options.out_dir);
    kept.emplace(options.out_dir / "samples.partial.jsonl", samples_fingerprint(options, artifact),
                 out, sample_matches_model(tokenizer, model->config().vocab_size));
  }
  std::vector<size_t> request_problem;
  const auto requests =
      missing_sample_requests(all_requests, problems, kept ? &*kept : nullptr, request_problem);
  int64_t samples_done = total_samples;
  for (const auto& r : requests) samples_done -= static_cast<int64_t>(requested_samples(r).size());
  if (options.stage_files)
    progress.emplace(options.out_dir, "eval-math", "samples", total_samples, samples_done);
  std::optional<EvalTensorBoard> tensorboard;
  if (options.tensorboard)
    tensorboard.emplace(options.out_dir / "tb", eval_config_json(options, artifact));

  generation::EngineOptions engine_options = options.engine;
  engine_options.show_progress = options.show_progress;
  // A signal (SLURM's warning, SIGTERM from `rqat run`, Ctrl-C) stops generation after the
  // samples in flight; what finished is on disk. Not for in-memory evaluations: the trainer
  // that runs them has its own handlers.
  std::optional<io::StopRequest> stop;
  if (options.stage_files) {
    stop.emplace("stopping after the samples in flight (finished ones are kept)");
    engine_options.stop_requested = [&stop] { return stop->requested(); };
  }
  generation::GenerationEngine engine(*model, tokenizer, engine_options);
  const auto generation_start = std::chrono::steady_clock::now();
  int64_t generated_tokens = 0;
  const auto on_result = [&](const generation::GenerationResult& r) {
    ++samples_done;
    generated_tokens += static_cast<int64_t>(r.token_ids.size());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - generation_start).count();
    const double tokens_per_second = seconds > 0 ? generated_tokens / seconds : 0.0;
    if (kept) kept->append(problems[request_problem[r.request_index]].id, r);
    if (progress) progress->update(samples_done, {{"tokens_per_second", tokens_per_second}});
    if (tensorboard)
      tensorboard->sample_finished(samples_done, static_cast<int64_t>(r.token_ids.size()),
                                   r.finish_reason == generation::FinishReason::kLength,
                                   tokens_per_second);
  };
  auto generated = requests.empty() ? std::vector<generation::GenerationResult>{}
                                    : engine.generate(requests, on_result);
  if (engine.stats().stopped) {
    progress->finish("stopped");
    out << fmt::format(
        "stopped by signal {} after {} of {} samples (kept in {}); run the same command to "
        "continue\n",
        stop->signal(), samples_done, total_samples, kept->path().string());
    EvalSummary stopped;
    stopped.stopped_by_signal = stop->signal();
    return stopped;
  }
  const auto results = merged_results(all_requests, problems, kept ? &*kept : nullptr,
                                      std::move(generated), request_problem);

  const auto grading_start = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(results.size());
  for (const auto& r : results) pairs.emplace_back(r.text, problems[r.request_index].gold);
  const auto grades = grade_batch(pairs, options.grade_threads, options.grade);
  const double grading_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - grading_start).count();

  EvalRecords records;
  records.problems = &problems;
  records.prompts = &prompts;
  records.results = &results;
  records.grades = &grades;
  records.generation_seconds = engine.stats().seconds;
  records.generated_tokens = engine.stats().generated_tokens;
  records.grading_seconds = grading_seconds;
  std::vector<double> rewards;
  if (options.reward.score) {
    rewards.reserve(results.size());
    for (const auto& r : results)
      rewards.push_back(options.reward.score(r.text, problems[r.request_index].gold,
                                             r.finish_reason == generation::FinishReason::kLength));
    records.rewards = &rewards;
  }
  std::vector<GradedSample> graded = graded_samples(records);
  EvalSummary summary = summarize_samples(graded, options.ks);
  if (options.reward.score) summary.reward_spec = options.reward.spec;
  const io::Hdf5Columns columns = results_columns(options, records);  // results.h5 and TensorBoard
  write_eval_outputs(options, artifact, records, summary, columns);
  if (tensorboard) tensorboard->finish(columns, summary, records);
  if (progress) {
    io::Json latest = {{"accuracy", summary.overall.pass1}};
    if (summary.overall.reward) latest["mean_reward"] = summary.overall.reward->mean;
    progress->finish("done", latest);
  }
  if (kept) kept->remove();

  out << format_summary_table(summary, options.benchmark.name);
  out << fmt::format(
      "generated {} tokens in {:.1f} s ({:.1f} tokens/s); graded {} samples in {:.2f} s\n",
      records.generated_tokens, records.generation_seconds,
      records.generation_seconds > 0 ? records.generated_tokens / records.generation_seconds : 0.0,
      grades.size(), grading_seconds);
  out << fmt::format("wrote {}\n", options.out_dir.string());
  return summary;
}

EvalSummary evaluate_model_in_memory(model::CausalLM& model, const std::filesystem::path& model_dir,
                                     const std::string& benchmark, const std::string& data,
                                     int64_t limit, int64_t max_new_tokens,
                                     const PromptOptions& prompt, c10::Device device,
                                     const std::filesystem::path& out_dir) {
  EvalRunOptions e;
  e.model_dir = model_dir;
  e.model = &model;
  e.out_dir = out_dir;
  e.benchmark = resolve_benchmark(benchmark, !data.empty(), {});
  e.data_path = resolve_benchmark_data(data, "", benchmark);
  e.limit = static_cast<size_t>(limit);
  e.prompt = prompt;
  e.sampling.max_new_tokens = max_new_tokens;  // greedy: the SamplingSettings defaults
  e.device = device;
  e.show_progress = false;
  e.tensorboard = false;  // the trainer logs the metrics in its own event file
  e.stage_files = false;
  std::ostringstream quiet;
  return run_evaluation(e, quiet);
}

}  // namespace rqat::eval
