// The eval-math run: sampling protocols, prompts and seeds, and an end-to-end run of a tiny model
// with the Qwen2.5 tokenizer over 20 MATH-500 problems, whose outputs must agree with each other
// and be reproduced by `eval-math grade` (regrade_file).
#include "catch.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "eval/metrics.h"
#include "eval/regrade.h"
#include "io/hdf5_columns.h"
#include "io/json_file.h"
#include "io/jsonl.h"
#include "test_util.h"
#include "tools/eval_run/evaluate.h"
#include "tools/eval_run/partial_samples.h"
#include "tools/model_commands.h"
#include "tools/sample_reward.h"

using namespace rqat;

TEST_CASE("sampling protocols: greedy and reasoning are one flag apart", "[eval_run]") {
  const auto greedy = eval::resolve_sampling("greedy", {});
  CHECK(greedy.n == 1);
  CHECK(greedy.temperature == 0);
  CHECK(greedy.top_p == 1.0);
  const auto reasoning = eval::resolve_sampling("reasoning", {});
  CHECK(reasoning.temperature == 0.6);
  CHECK(reasoning.top_p == 0.95);
  CHECK(reasoning.n == 8);
  CHECK(reasoning.max_new_tokens == 32768);
  eval::SamplingOverrides overrides;
  overrides.n = 3;
  overrides.max_new_tokens = 100;
  const auto custom = eval::resolve_sampling("reasoning", overrides);
  CHECK(custom.n == 3);
  CHECK(custom.max_new_tokens == 100);
  CHECK(custom.temperature == 0.6);
  test::require_error([] { eval::resolve_sampling("beam", {}); }, {"--protocol", "beam"});
  overrides = {};
  overrides.top_p = 0.0;
  test::require_error([&] { eval::resolve_sampling("greedy", overrides); }, {"--top-p"});
  overrides = {};
  overrides.n = 0;
  test::require_error([&] { eval::resolve_sampling("greedy", overrides); }, {"--n"});
}

TEST_CASE("prompts carry the instruction; seeds depend on the problem id only", "[eval_run]") {
  eval::PromptOptions prompt;
  CHECK(eval::build_user_message("What is 1+1?", prompt) ==
        "What is 1+1?\nPlease reason step by step, and put your final answer within \\boxed{}.");
  prompt.instruction = "";
  CHECK(eval::build_user_message("What is 1+1?", prompt) == "What is 1+1?");
  CHECK(eval::problem_seed(0, "test/algebra/1.json") ==
        eval::problem_seed(0, "test/algebra/1.json"));
  CHECK(eval::problem_seed(0, "a") != eval::problem_seed(0, "b"));
  CHECK(eval::problem_seed(0, "a") != eval::problem_seed(1, "a"));
}

namespace {

// A tiny random Qwen2 model with the real Qwen2.5 tokenizer and its ChatML template.
std::filesystem::path make_tiny_chat_model(const test::TempDir& dir,
                                           const std::filesystem::path& tokenizer_dir) {
  const auto model_dir = dir / "model";
  test::write_bytes(dir / "config.json", R"({"model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 151665, "rope_theta": 1000000.0,
    "tie_word_embeddings": true, "initializer_range": 0.3, "eos_token_id": 151645})");
  tools::InitModelOptions init;
  init.config_json = dir / "config.json";
  init.out_dir = model_dir;
  init.seed = 7;
  tools::init_model_dir(init);
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"})
    std::filesystem::copy_file(tokenizer_dir / name, model_dir / name);
  return model_dir;
}

std::vector<io::Json> read_jsonl(const std::filesystem::path& path) {
  std::vector<io::Json> rows;
  io::for_each_jsonl_object<io::Json>(
      path, [&](io::Json& row, std::size_t) { rows.push_back(std::move(row)); });
  return rows;
}

// A run of `limit` MATH-500 problems on a fresh tiny chat model in `dir`; nullopt (after printing
// SKIPPED) when ../shared/data lacks the Qwen2.5 tokenizer or MATH-500.
std::optional<eval::EvalRunOptions> tiny_math500_run(const test::TempDir& dir, std::size_t limit,
                                                     const eval::SamplingOverrides& overrides) {
  const auto shared = test::shared_data_dir();
  const auto tokenizer_dir = shared / "tokenizers" / "qwen2.5";
  const auto math500 = shared / "math500" / "test.jsonl";
  if (!std::filesystem::exists(tokenizer_dir / "vocab.json") || !std::filesystem::exists(math500)) {
    std::puts("SKIPPED: ../shared/data (Qwen2.5 tokenizer, MATH-500) is absent");
    return std::nullopt;
  }
  eval::EvalRunOptions options;
  options.model_dir = make_tiny_chat_model(dir, tokenizer_dir);
  options.out_dir = dir / "eval";
  options.benchmark = eval::builtin_benchmark("math500");
  options.data_path = math500;
  options.limit = limit;
  options.sampling = eval::resolve_sampling("greedy", overrides);
  options.show_progress = false;
  return options;
}

}  // namespace

TEST_CASE("end to end: 20 MATH-500 problems on a tiny model; eval-math grade reproduces it",
          "[eval_run]") {
  test::TempDir dir("eval_run");
  eval::SamplingOverrides overrides;
  overrides.n = 2;
  overrides.temperature = 0.8;
  overrides.max_new_tokens = 12;
  overrides.seed = 5;
  auto run = tiny_math500_run(dir, 20, overrides);
  if (!run) return;
  auto& options = *run;
  options.engine.max_batch = 8;
  std::ostringstream console;
  const auto summary = eval::run_evaluation(options, console);
  INFO(console.str());
  CHECK(console.str().find("pass@1 (%)") != std::string::npos);
  CHECK(console.str().find("subject") != std::string::npos);

  // samples.jsonl: 40 lines in (problem, sample) order with every field.
  const auto rows = read_jsonl(options.out_dir / "samples.jsonl");
  REQUIRE(rows.size() == 40);
  const auto problems = eval::load_benchmark(options.data_path, options.benchmark);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    for (const char* field : {"id", "sample", "prompt", "completion", "extracted", "gold",
                              "correct", "grade", "tokens", "finish_reason", "subject", "level"})
      REQUIRE(row.contains(field));
    CHECK(row["id"] == problems[i / 2].id);
    CHECK(row["sample"] == static_cast<int>(i % 2));
    CHECK(row["gold"] == problems[i / 2].gold);
    const std::string prompt = row["prompt"];
    CHECK(prompt.find(problems[i / 2].problem) != std::string::npos);
    CHECK(prompt.find("<|im_start|>assistant\n") != std::string::npos);
    CHECK(prompt.find("within \\boxed{}") != std::string::npos);
    CHECK(row["tokens"].get<int>() <= 12);
    CHECK((row["finish_reason"] == "length") == (row["tokens"].get<int>() == 12));
  }

  // summary.json records the model, the quantization (none), and every sampling parameter.
  const auto summary_json = io::read_json_file(options.out_dir / "summary.json");
  CHECK(summary_json["model"] == options.model_dir.string());
  CHECK(summary_json["quant"].is_null());
  CHECK(summary_json["sampling"]["n"] == 2);
  CHECK(summary_json["sampling"]["temperature"] == 0.8);
  CHECK(summary_json["sampling"]["top_p"] == 1.0);
  CHECK(summary_json["sampling"]["max_new_tokens"] == 12);
  CHECK(summary_json["sampling"]["seed"] == 5);
  CHECK(summary_json["metrics"]["problems"] == 20);
  CHECK(summary_json["metrics"]["samples"] == 40);
  CHECK(summary_json["metrics"].contains("by_subject"));
  CHECK(summary_json["metrics"].contains("by_level"));
  const auto manifest = io::read_json_file(options.out_dir / "manifest.json");
  CHECK(manifest["tool"] == "eval-math");
  CHECK(manifest.contains("git_revision"));

  // results.h5 holds the same per-sample results.
  const auto h5 = io::Hdf5Columns::read(options.out_dir / "results.h5");
  const auto& correct = std::get<std::vector<int64_t>>(h5.columns().at("samples/correct"));
  const auto& tokens = std::get<std::vector<int64_t>>(h5.columns().at("samples/tokens"));
  const auto& ids = std::get<std::vector<std::string>>(h5.columns().at("samples/id"));
  REQUIRE(correct.size() == 40);
  double mean_tokens = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(correct[i] == (rows[i]["correct"].get<bool>() ? 1 : 0));
    CHECK(tokens[i] == rows[i]["tokens"].get<int64_t>());
    CHECK(ids[i] == rows[i]["id"].get<std::string>());
    mean_tokens += static_cast<double>(tokens[i]) / 40.0;
  }
  CHECK(h5.attributes().at("benchmark") == "math500");
  CHECK(summary.overall.mean_tokens == Approx(mean_tokens).epsilon(1e-12));

  // `eval-math grade` on samples.jsonl reproduces the run's metrics.
  const auto regraded =
      eval::regrade_file(options.out_dir / "samples.jsonl", dir / "regraded.jsonl");
  CHECK(regraded.count == 40);
  CHECK(eval::summary_json(regraded.metrics) == summary_json["metrics"]);

  // Each row's grade is the grader's verdict on that row's own completion and gold.
  for (const auto& row : rows) {
    const auto verdict =
        eval::grade(row["completion"].get<std::string>(), row["gold"].get<std::string>());
    CHECK(row["grade"] == eval::to_string(verdict.kind));
    CHECK(row["correct"] == (verdict.kind == eval::GradeKind::equal));
  }
}

TEST_CASE("a configured reward scores every sample; the summary reports its mean", "[eval_run]") {
  test::TempDir dir("eval_run_reward");
  eval::SamplingOverrides overrides;
  overrides.n = 3;
  overrides.temperature = 1.0;
  overrides.max_new_tokens = 10;
  auto run = tiny_math500_run(dir, 5, overrides);
  if (!run) return;
  auto& options = *run;
  // A reward that depends on all three inputs, so that a wrong argument shows.
  auto toy = [](const std::string& completion, const std::string& gold, bool truncated) {
    return static_cast<double>((completion.size() + gold.size()) % 7) / 4.0 + (truncated ? 0.5 : 0);
  };
  options.reward = {"toy", toy};
  std::ostringstream console;
  const auto summary = eval::run_evaluation(options, console);
  CHECK(console.str().find("mean reward (toy): ") != std::string::npos);

  const auto rows = read_jsonl(options.out_dir / "samples.jsonl");
  REQUIRE(rows.size() == 15);
  std::vector<double> problem_means(5, 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double want =
        toy(rows[i]["completion"], rows[i]["gold"], rows[i]["finish_reason"] == "length");
    CHECK(rows[i]["reward"].get<double>() == want);
    problem_means[i / 3] += want / 3;
  }
  const auto expected = eval::mean_and_standard_error(problem_means);
  REQUIRE(summary.overall.reward.has_value());
  CHECK(summary.overall.reward->mean == Approx(expected.mean));
  CHECK(summary.overall.reward->standard_error == Approx(expected.standard_error));
  const auto json = io::read_json_file(options.out_dir / "summary.json");
  CHECK(json["metrics"]["reward"] == "toy");
  CHECK(json["metrics"]["mean_reward"].get<double>() == Approx(expected.mean));
  const auto h5 = io::Hdf5Columns::read(options.out_dir / "results.h5");
  const auto& rewards = std::get<std::vector<double>>(h5.columns().at("samples/reward"));
  REQUIRE(rewards.size() == 15);
  for (std::size_t i = 0; i < rows.size(); ++i)
    CHECK(rewards[i] == rows[i]["reward"].get<double>());
}

TEST_CASE("eval-math --reward: a grpo reward spec as the evaluation's score", "[eval_run]") {
  const auto reward = tools::sample_reward("math_boxed+format_last_box");
  CHECK(reward.spec == "math_boxed+format_last_box:0.1");
  CHECK(reward.score("so \\boxed{4}", "4", /*truncated=*/true) == Approx(1.1));
  CHECK(reward.score("\\boxed{5}", "4", false) == Approx(0.1));
  CHECK(reward.score("4", "4", false) == 0.0);
  test::require_error([] { tools::sample_reward("math+nope"); }, {"--reward", "'nope'"});
}

TEST_CASE("eval run errors name the flag or file", "[eval_run]") {
  eval::EvalRunOptions options;
  options.model_dir = "/nonexistent/model";
  options.out_dir = "/tmp/unused";
  options.benchmark = eval::builtin_benchmark("gsm8k");
  options.data_path = "/nonexistent/gsm8k.jsonl";
  std::ostringstream console;
  test::require_error([&] { eval::run_evaluation(options, console); },
                      {"/nonexistent/gsm8k.jsonl"});
  test::require_error([] { eval::resolve_benchmark("nope", false, {}); }, {"nope", "math500"});
  CHECK(eval::resolve_benchmark("mine", true, {}).answer_field == "answer");
  unsetenv("RQAT_DATA_DIR");
  test::require_error([] { eval::resolve_benchmark_data("", "", "aime24"); }, {"--data"});
  CHECK(eval::resolve_benchmark_data("", "/d", "aime24") == "/d/aime24/test.jsonl");
}

TEST_CASE("kept samples come back byte for byte, invalid UTF-8 and a torn last line included") {
  test::TempDir dir("partial-samples");
  const auto file = dir / "samples.partial.jsonl";
  const io::Json fingerprint = {{"model", "m"}, {"seed", 3}};
  generation::GenerationResult a, b;
  a.sample_index = 1;
  a.token_ids = {5, 6, 7};
  a.text = "x = 2\n\\boxed{2}";
  a.finish_reason = generation::FinishReason::kStopToken;
  a.seconds = 0.25;
  b.sample_index = 0;
  b.token_ids = {200};
  b.text = std::string("cut \xe2\x82", 6);  // a character cut in half: not UTF-8
  std::ostringstream log;
  {
    eval::PartialSamples kept(file, fingerprint, log);
    CHECK(kept.size() == 0);
    kept.append("p1", a);
    kept.append("p2", b);
  }
  std::ofstream(file, std::ios::app) << R"({"id": "p3", "sample": 0, "tok)";  // killed mid-write
  eval::PartialSamples again(file, fingerprint, log);
  REQUIRE(again.size() == 2);
  const auto* got_a = again.find("p1", 1);
  const auto* got_b = again.find("p2", 0);
  REQUIRE(got_a);
  REQUIRE(got_b);
  CHECK(got_a->text == a.text);
  CHECK(got_a->token_ids == a.token_ids);
  CHECK(got_a->finish_reason == a.finish_reason);
  CHECK(got_a->seconds == a.seconds);
  CHECK(got_b->text == b.text);
  CHECK(again.find("p3", 0) == nullptr);
  CHECK_THAT(log.str(), Catch::Contains("resuming: 2 finished samples kept"));
  // Other settings: nothing is reused.
  eval::PartialSamples other(file, {{"model", "other"}}, log);
  CHECK(other.size() == 0);
  CHECK_THAT(log.str(), Catch::Contains("made with other settings"));
}
