#include "eval/run/evaluate.h"

#include <sstream>

#include <fmt/format.h>

#include <chrono>
#include <ostream>

#include "chat/chat_template.h"
#include "eval/run/eval_outputs.h"
#include "generation/generation_engine.h"
#include "io/error.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "quant/load_model.h"
#include "tokenizer/tokenizer.h"

namespace rqat::eval {

std::string build_user_message(const std::string& problem, const PromptOptions& prompt) {
  if (prompt.instruction.empty()) return problem;
  return problem + "\n" + prompt.instruction;
}

uint64_t problem_seed(uint64_t run_seed, const std::string& problem_id) {
  // FNV-1a over the id, then a splitmix64 finalizer mixing in the run seed: stable across
  // platforms and standard libraries (std::hash is neither).
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : problem_id) h = (h ^ c) * 0x100000001b3ULL;
  uint64_t z = h + run_seed * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<std::string> render_problem_prompts(const std::vector<std::string>& problems,
                                                const PromptOptions& prompt,
                                                const std::filesystem::path& model_dir,
                                                bool& add_special_tokens) {
  std::vector<std::string> prompts;
  prompts.reserve(problems.size());
  if (!prompt.use_chat_template) {
    add_special_tokens = true;
    for (const auto& p : problems) prompts.push_back(build_user_message(p, prompt) + "\n");
    return prompts;
  }
  std::optional<std::filesystem::path> override_file;
  if (!prompt.chat_template_file.empty()) override_file = prompt.chat_template_file;
  const auto chat = chat::ChatTemplate::load(model_dir, override_file);
  add_special_tokens = false;  // the template writes BOS itself where the family has one
  for (const auto& p : problems) {
    std::vector<chat::Message> messages;
    if (!prompt.system_prompt.empty()) messages.push_back({"system", prompt.system_prompt});
    messages.push_back({"user", build_user_message(p, prompt)});
    prompts.push_back(
        chat.render(messages, {/*add_generation_prompt=*/true, prompt.enable_thinking}));
  }
  return prompts;
}

namespace {

std::vector<std::string> render_prompts(const std::vector<BenchmarkProblem>& problems,
                                        const EvalRunOptions& options, bool& add_special_tokens) {
  std::vector<std::string> texts;
  texts.reserve(problems.size());
  for (const auto& p : problems) texts.push_back(p.problem);
  return render_problem_prompts(texts, options.prompt, options.model_dir, add_special_tokens);
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

  auto tokenizer = tokenizer::Tokenizer::load(options.model_dir);
  bool add_special_tokens = true;
  const auto prompts = render_prompts(problems, options, add_special_tokens);
  std::shared_ptr<model::CausalLM> loaded;
  if (!options.model)
    loaded =
        quant::load_model(options.model_dir, model::LoadOptions{options.dtype, options.device, options.dequantize});
  model::CausalLM* model = options.model ? options.model : loaded.get();

  const auto stop_token_ids = model::model_stop_token_ids(model->config());
  std::vector<generation::GenerationRequest> requests(problems.size());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    auto& request = requests[i];
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
  generation::EngineOptions engine_options = options.engine;
  engine_options.show_progress = options.show_progress;
  generation::GenerationEngine engine(*model, tokenizer, engine_options);
  const auto results = engine.generate(requests);

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
  write_eval_outputs(options, records, summary);

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
  std::ostringstream quiet;
  return run_evaluation(e, quiet);
}

}  // namespace rqat::eval
