// Teacher traces: eval-math samples.jsonl -> prompt/response training JSONL. Filters (grade,
// truncation, length, duplicates, per-problem cap) and output order on hand-written samples, one-
// line errors naming FILE:LINE and the field, loading the traces with the chat template (ids by
// hand), and a full round trip: eval-math on a tiny model writes user/system, and the training
// document rebuilt from a trace starts with exactly the prompt ids the model was sampled from.
#include "catch.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <tuple>

#include "chat/chat_template.h"
#include "data/teacher_traces.h"
#include "data/text_dataset.h"
#include "io/json_file.h"
#include "io/jsonl.h"
#include "test_util.h"
#include "tools/eval_run/evaluate.h"
#include "tools/model_commands.h"

namespace {

using nlohmann::json;
using namespace rqat;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;
using tokenizer::TokenId;

json sample(const std::string& id, int n, bool correct, const std::string& completion,
            const std::string& finish = "stop", int tokens = 50) {
  return {{"id", id},
          {"sample", n},
          {"prompt", "<|im_start|>user\nQ" + id + "<|im_end|>\n<|im_start|>assistant\n"},
          {"system", ""},
          {"user", "Q" + id},
          {"completion", completion},
          {"extracted", nullptr},
          {"gold", "g" + id},
          {"correct", correct},
          {"grade", correct ? "equal" : "different"},
          {"tokens", tokens},
          {"finish_reason", finish}};
}

std::vector<io::Json> read_jsonl(const std::filesystem::path& path) {
  std::vector<io::Json> rows;
  io::for_each_jsonl_object<io::Json>(
      path, [&](io::Json& row, std::size_t) { rows.push_back(std::move(row)); });
  return rows;
}

// The "source" (FILE:LINE) of every trace, the identity of each kept sample.
std::vector<std::string> sources(const std::filesystem::path& path) {
  std::vector<std::string> out;
  for (const auto& row : read_jsonl(path)) out.push_back(row["source"].get<std::string>());
  return out;
}

// Two files of samples; comments give the line numbers.
void write_samples(const TempDir& dir) {
  write_bytes(dir / "a.jsonl", sample("p1", 0, true, "A1").dump() + "\n" +                   // 1
                                   sample("p1", 1, false, "wrong").dump() + "\n" +           // 2
                                   sample("p1", 2, true, "A-cut", "length").dump() + "\n" +  // 3
                                   sample("p1", 3, true, "A1").dump() + "\n" +  // 4 duplicate
                                   sample("p2", 0, true, "B1", "stop", 3).dump() + "\n" +  // 5
                                   "   \n" +                                               // 6
                                   sample("p2", 1, true, "B2").dump() + "\n" +             // 7
                                   sample("p2", 2, true, "B3").dump() + "\n" +             // 8
                                   sample("p3", 0, false, "C?").dump() + "\n");            // 9
  write_bytes(dir / "b.jsonl", sample("p1", 0, true, "A2").dump() + "\n" +                 // 1
                                   sample("p2", 0, true, "B4").dump() + "\n");             // 2
}

}  // namespace

TEST_CASE("traces: correct, finished, distinct samples in input order", "[traces]") {
  TempDir dir("traces_filters");
  write_samples(dir);
  const std::string a = (dir / "a.jsonl").string(), b = (dir / "b.jsonl").string();
  data::TraceOptions options;
  options.inputs = {dir / "a.jsonl", dir / "b.jsonl"};
  options.out = dir / "out" / "traces.jsonl";

  auto summary = data::write_teacher_traces(options);
  CHECK(sources(options.out) ==
        std::vector<std::string>{a + ":1", a + ":5", a + ":7", a + ":8", b + ":1", b + ":2"});
  CHECK(summary.files == 2);
  CHECK(summary.samples_read == 10);
  CHECK(summary.problems == 3);
  CHECK(summary.kept == 6);
  CHECK(summary.problems_with_trace == 2);
  CHECK(summary.incorrect == 2);
  CHECK(summary.truncated == 1);
  CHECK(summary.duplicates == 1);
  CHECK(summary.too_short == 0);
  CHECK(summary.over_limit == 0);
  CHECK_FALSE(summary.any_system_prompt);
  const auto line = data::format_trace_summary(summary, options);
  INFO(line);
  CHECK(line.find("10 samples of 3 problems from 2 files; kept 6") != std::string::npos);
  CHECK(line.find("2 problems with a trace") != std::string::npos);
  CHECK(line.find('\n') == std::string::npos);

  // The trace of a.jsonl:7, every field and in this order.
  const auto rows = read_jsonl(options.out);
  CHECK(rows[2].dump() == io::Json({{"id", "p2"},
                                    {"prompt", "Qp2"},
                                    {"response", "B2"},
                                    {"system", ""},
                                    {"gold", "gp2"},
                                    {"source", a + ":7"}})
                              .dump());

  options.min_tokens = 10;  // drops a.jsonl:5 (3 tokens)
  options.max_per_problem = 2;
  summary = data::write_teacher_traces(options);
  CHECK(sources(options.out) == std::vector<std::string>{a + ":1", a + ":7", a + ":8", b + ":1"});
  CHECK(summary.too_short == 1);
  CHECK(summary.over_limit == 1);  // b.jsonl:2, the third trace of p2

  options.min_tokens = 0;  // defaults again, then every filter off
  options.max_per_problem.reset();
  options.include_incorrect = true;
  options.drop_truncated = false;
  options.dedupe = false;
  summary = data::write_teacher_traces(options);
  CHECK(sources(options.out) == std::vector<std::string>{a + ":1", a + ":2", a + ":3", a + ":4",
                                                         a + ":5", a + ":7", a + ":8", a + ":9",
                                                         b + ":1", b + ":2"});
  CHECK(summary.problems_with_trace == 3);

  // Dedupe is per problem, and a problem is its id and user turn: the same text under two ids, or
  // under one id with another instruction, is kept each time.
  auto other_instruction = sample("p1", 1, true, "same");
  other_instruction["user"] = "Qp1\nAnswer in one word.";
  write_bytes(dir / "c.jsonl", sample("p1", 0, true, "same").dump() + "\n" +
                                   sample("p2", 0, true, "same").dump() + "\n" +
                                   sample("p2", 1, true, "same").dump() + "\n" +
                                   other_instruction.dump() + "\n");
  const auto out = options.out;
  options = data::TraceOptions();
  options.inputs = {dir / "c.jsonl"};
  options.out = out;
  summary = data::write_teacher_traces(options);
  CHECK(summary.problems == 3);
  CHECK(summary.kept == 3);
  CHECK(summary.duplicates == 1);
}

TEST_CASE("traces: bad input is one line naming FILE:LINE and the field; nothing written",
          "[traces]") {
  TempDir dir("traces_errors");
  write_samples(dir);
  data::TraceOptions options;
  options.out = dir / "t.jsonl";
  const std::string bad = (dir / "bad.jsonl").string();

  options.inputs = {dir / "a.jsonl", dir / "missing.jsonl"};
  require_error([&] { data::write_teacher_traces(options); }, {"missing.jsonl", "not found"});

  auto no_user = sample("p9", 0, true, "x");
  no_user.erase("user");
  write_bytes(bad, sample("p8", 0, true, "x").dump() + "\n" + no_user.dump() + "\n");
  options.inputs = {bad};
  require_error([&] { data::write_teacher_traces(options); }, {bad + ":2", "'user'"});

  write_bytes(bad, "\n{\"id\": \"p1\", \n");
  require_error([&] { data::write_teacher_traces(options); }, {bad + ":2", "invalid JSON"});

  auto graded_as_text = sample("p1", 0, true, "x");
  graded_as_text["correct"] = "yes";
  write_bytes(bad, graded_as_text.dump() + "\n");
  require_error([&] { data::write_teacher_traces(options); }, {bad + ":1", "'correct'"});
  options.include_incorrect = true;  // the grade is not needed with --all
  CHECK(data::write_teacher_traces(options).kept == 1);
  std::filesystem::remove(options.out);

  auto no_tokens = sample("p1", 0, true, "x");
  no_tokens.erase("tokens");
  write_bytes(bad, no_tokens.dump() + "\n");
  options.min_tokens = 5;
  require_error([&] { data::write_teacher_traces(options); },
                {bad + ":1", "'tokens'", "--min-tokens"});
  options.min_tokens = 0;
  options.max_per_problem = 0;
  require_error([&] { data::write_teacher_traces(options); }, {"--max-per-problem"});
  CHECK_FALSE(std::filesystem::exists(options.out));
}

TEST_CASE("traces load as chat documents: the loss covers the response only", "[traces]") {
  TempDir dir("traces_chat");
  const auto tok = test::byte_level_test_tokenizer(dir);
  const auto chat = chat::ChatTemplate::load(dir.path());
  write_samples(dir);
  data::TraceOptions options;
  options.inputs = {dir / "b.jsonl"};
  options.out = dir / "traces.jsonl";
  data::write_teacher_traces(options);

  data::TextDataOptions data_options;
  data_options.path = options.out;
  data_options.use_chat_template = true;
  data_options.prompt_field = "prompt";
  data_options.response_field = "response";
  const auto data = data::load_tokenized_dataset(data_options, *tok, &chat);
  REQUIRE(data.documents.size() == 2);
  // ChatML by hand (one token per byte; <|im_start|> = 257, <|im_end|> = 258).
  for (const auto& [doc, user, response] :
       {std::tuple{data.documents[0], "Qp1", "A2"}, std::tuple{data.documents[1], "Qp2", "B4"}}) {
    std::vector<TokenId> ids{257};
    for (char c : std::string("user\n") + user) ids.push_back(static_cast<unsigned char>(c));
    ids.insert(ids.end(), {258, '\n', 257});
    for (char c : std::string("assistant\n")) ids.push_back(static_cast<unsigned char>(c));
    std::vector<uint8_t> mask(ids.size(), 0);
    for (char c : std::string(response)) ids.push_back(static_cast<unsigned char>(c));
    ids.insert(ids.end(), {258, '\n'});
    mask.resize(ids.size(), 1);
    CHECK(doc.tokens == ids);
    CHECK(doc.loss_mask == mask);
  }
}

TEST_CASE("eval-math writes user and system; a trace rebuilds the sampled prompt exactly",
          "[traces]") {
  TempDir dir("traces_round_trip");
  // A tiny random Qwen2 model over the byte-level test tokenizer (259 tokens, ChatML).
  const auto tok = test::byte_level_test_tokenizer(dir);
  const auto model_dir = dir / "model";
  write_bytes(dir / "config.json", R"({"model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 260, "max_position_embeddings": 512,
    "tie_word_embeddings": true, "initializer_range": 0.3, "eos_token_id": 258})");
  tools::InitModelOptions init;
  init.config_json = dir / "config.json";
  init.out_dir = model_dir;
  init.seed = 5;
  tools::init_model_dir(init);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(dir / name, model_dir / name);
  write_bytes(dir / "problems.jsonl", R"({"problem": "What is 1+1?", "answer": "2"}
{"problem": "Name a prime.", "answer": "7"}
)");

  eval::EvalRunOptions run;
  run.model_dir = model_dir;
  run.out_dir = dir / "eval";
  run.benchmark = eval::resolve_benchmark("mine", true, {});
  run.data_path = dir / "problems.jsonl";
  run.prompt.system_prompt = "You are terse.";
  eval::SamplingOverrides overrides;
  overrides.n = 2;
  overrides.temperature = 1.0;
  overrides.max_new_tokens = 6;
  overrides.seed = 3;
  run.sampling = eval::resolve_sampling("greedy", overrides);
  run.grade_threads = 1;
  run.show_progress = false;
  std::ostringstream console;
  eval::run_evaluation(run, console);

  const auto samples = read_jsonl(run.out_dir / "samples.jsonl");
  REQUIRE(samples.size() == 4);
  const auto problems = eval::load_benchmark(run.data_path, run.benchmark);
  for (size_t i = 0; i < samples.size(); ++i) {
    CHECK(samples[i]["system"] == "You are terse.");
    CHECK(samples[i]["user"] ==
          problems[i / 2].problem + "\n" + std::string(eval::kDefaultInstruction));
  }

  // All samples (a random model is never right), kept whether or not they finished.
  data::TraceOptions options;
  options.inputs = {run.out_dir / "samples.jsonl"};
  options.out = dir / "traces.jsonl";
  options.include_incorrect = true;
  options.drop_truncated = false;
  options.dedupe = false;
  const auto summary = data::write_teacher_traces(options);
  CHECK(summary.kept == 4);
  CHECK(summary.any_system_prompt);
  CHECK(data::format_trace_summary(summary, options).find("same --system-prompt") !=
        std::string::npos);

  const auto chat = chat::ChatTemplate::load(model_dir);
  data::TextDataOptions data_options;
  data_options.path = options.out;
  data_options.use_chat_template = true;
  data_options.system_prompt = "You are terse.";
  const auto data = data::load_tokenized_dataset(data_options, *tok, &chat);
  REQUIRE(data.documents.size() == 4);
  for (size_t i = 0; i < samples.size(); ++i) {
    // The ids eval-math sampled from, and the training document's untrained prefix.
    const auto prompt_ids = tok->encode(samples[i]["prompt"].get<std::string>(), false);
    const auto& doc = data.documents[i];
    REQUIRE(doc.tokens.size() > prompt_ids.size());
    CHECK(std::vector<TokenId>(doc.tokens.begin(), doc.tokens.begin() + prompt_ids.size()) ==
          prompt_ids);
    CHECK(std::all_of(doc.loss_mask.begin(), doc.loss_mask.begin() + prompt_ids.size(),
                      [](uint8_t m) { return m == 0; }));
    CHECK(std::all_of(doc.loss_mask.begin() + prompt_ids.size(), doc.loss_mask.end(),
                      [](uint8_t m) { return m == 1; }));
  }
}
