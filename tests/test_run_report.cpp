// `rqat report` tables from a hand-made run directory: plan.json, manifests, eval-math summaries
// and the runner's logs/<id>.json, with seeded random accuracies whose percentages the test formats
// itself (printf) and compares with the library's cells, markdown and CSV.
#include <fmt/format.h>
#include "catch.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "experiment/run_report.h"
#include "io/hdf5_columns.h"
#include "io/manifest.h"
#include "test_util.h"

namespace fs = std::filesystem;
using rqat::io::Json;
using namespace rqat::experiment;

namespace {

std::string pct(double share) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", 100.0 * share);
  return buffer;
}

Json quant(int bits, int group) {
  return {{"bits", bits}, {"group_size", group}, {"symmetric", false}};
}

// A run directory under construction: stages are added in plan (dependency) order.
struct FakeRun {
  fs::path dir;
  ExperimentPlan plan;

  explicit FakeRun(fs::path run_dir) : dir(std::move(run_dir)) {
    plan.name = "toy";
    plan.experiment_file = "toy.yaml";
    plan.run_dir = dir;
    plan.sweep_variables = {"bits"};
    fs::create_directories(dir / "logs");
  }

  StageInstance& add(const std::string& id, const std::string& tool, std::vector<std::string> argv,
                     std::vector<std::string> inputs = {}, std::string label = "") {
    StageInstance s;
    s.id = id;
    s.stage = id.substr(0, id.find('.'));
    s.tool = tool;
    s.program = tool;
    s.argv = std::move(argv);
    s.out_dir = dir / id;
    s.inputs = std::move(inputs);
    s.label = label.empty() ? id : label;
    plan.stages.push_back(std::move(s));
    return plan.stages.back();
  }

  void manifest(const std::string& id, const std::string& tool, Json config, Json metrics) {
    rqat::io::Manifest m;
    m.tool = tool;
    m.args = {tool};
    m.config = std::move(config);
    m.metrics = std::move(metrics);
    rqat::io::write_manifest(dir / id, m);
  }

  void summary(const std::string& id, const std::string& benchmark, Json quant_record,
               double pass1) {
    Json s = {{"benchmark", benchmark}, {"model", "m"}, {"quant", std::move(quant_record)}};
    s["metrics"] = {{"problems", 500}, {"pass@1", pass1}, {"pass@1_stderr", 0.02}};
    manifest(id, "eval-math", {{"benchmark", benchmark}}, {{"pass@1", pass1}});
    rqat::io::write_json_file(dir / id / "summary.json", s);
  }

  void log(const std::string& id, const std::string& status, double seconds, int exit_code = 0) {
    rqat::io::write_json_file(dir / "logs" / (id + ".json"),
                              {{"status", status}, {"seconds", seconds}, {"exit_code", exit_code}});
  }

  void write_plan_file() { write_plan(dir / "plan.json", plan); }
};

std::vector<std::string> eval_argv(const fs::path& model, const std::string& benchmark) {
  return {"--model", model.string(), "--benchmark", benchmark};
}

}  // namespace

TEST_CASE("bits_label names the quantization of a manifest or a Hugging Face config") {
  CHECK(bits_label(Json(nullptr)) == "16");
  CHECK(bits_label(quant(3, 128)) == "W3G128");
  CHECK(bits_label(quant(4, -1)) == "W4");  // one group per row
  CHECK(bits_label(Json{{"bits", 4}, {"group_size", 0}}) == "W4");
  CHECK(bits_label(Json{{"quant_method", "gptq"}, {"bits", 2}, {"group_size", 64}}) == "W2G64");
  CHECK(bits_label(Json{{"quant_method", "fp8"}}) == "?");
  // llama.cpp's grids by their type.
  CHECK(bits_label(Json{{"bits", 2}, {"group_size", 16}, {"grid", "gguf-q2_k"}}) == "Q2_K");
}

TEST_CASE("the report tabulates a run: rows per model, columns per benchmark, stage statuses") {
  rqat::test::TempDir tmp("run_report");
  FakeRun run(tmp / "run");
  std::mt19937_64 rng(20240508);
  std::uniform_int_distribution<int> correct(0, 500);
  auto share = [&] { return correct(rng) / 500.0; };  // pass@1 of 500 problems, one sample each
  const double w3_math = share(), w3_gsm = share(), base_math = share(), base_gsm = share(),
               teacher_math = share(), again_math = share();

  // W3G128: ptq -> qat-kd -> two evaluations (no labels of their own: the row takes qat's label).
  run.add("ptq.bits-3", "ptq", {"--bits", "3"});
  run.manifest("ptq.bits-3", "ptq", {{"quant", quant(3, 128)}},
               {{"quantized_layers", 7}, {"mean_relative_error", 0.0123}});
  run.log("ptq.bits-3", "done", 2.3);
  run.add("qat.bits-3", "qat-kd", {"--model", (run.dir / "ptq.bits-3").string()}, {"ptq.bits-3"},
          "RTN W3 + KD");
  run.manifest("qat.bits-3", "qat-kd", {{"quant", quant(3, 128)}},
               {{"steps", 10}, {"final_loss", 0.5}, {"nll", 2.125}});
  run.log("qat.bits-3", "skipped", 0.1);
  // The model path as the runner may write it: with a trailing slash.
  run.add("eval_math.bits-3", "eval-math", eval_argv(run.dir.string() + "/qat.bits-3/", "math500"),
          {"qat.bits-3"});
  run.summary("eval_math.bits-3", "math500", quant(3, 128), w3_math);
  run.log("eval_math.bits-3", "done", 61.0);
  // The baseline from outside the run: the row is named by the model directory.
  run.add("eval_base_math", "eval-math", eval_argv("/models/Qwen3-0.6B", "math500"));
  run.summary("eval_base_math", "math500", nullptr, base_math);
  run.add("eval_gsm.bits-3", "eval-math", eval_argv(run.dir / "qat.bits-3", "gsm8k"),
          {"qat.bits-3"});
  run.summary("eval_gsm.bits-3", "gsm8k", quant(3, 128), w3_gsm);
  run.add("eval_base_gsm", "eval-math", eval_argv("/models/Qwen3-0.6B", "gsm8k"));
  run.summary("eval_base_gsm", "gsm8k", nullptr, base_gsm);
  // An explicit label wins over the model's name; math500 only, so no average.
  run.add("eval_teacher", "eval-math", eval_argv("/models/Qwen3-8B", "math500"), {},
          "Teacher, BF16");
  run.summary("eval_teacher", "math500", nullptr, teacher_math);

  // W2 per-channel: qat failed, so its evaluations were blocked or never started.
  run.add("ptq.bits-2", "ptq", {"--bits", "2"});
  run.manifest("ptq.bits-2", "ptq", {{"quant", quant(2, -1)}}, {{"mean_relative_error", 0.25}});
  run.log("ptq.bits-2", "done", 1.9);
  run.add("qat.bits-2", "qat-kd", {"--model", (run.dir / "ptq.bits-2").string()}, {"ptq.bits-2"},
          "RTN W2 + KD");
  run.log("qat.bits-2", "failed", 4.0, 3);
  {
    // It got to step 3 before failing: the stage table shows its progress from metrics.h5.
    rqat::io::Hdf5Columns h5;
    h5.add("train/step", std::vector<int64_t>{1, 2, 3});
    h5.add("train/loss", std::vector<double>{0.9, 0.75, std::nan("")});
    h5.add("eval/step", std::vector<int64_t>{0});
    h5.write(run.dir / "qat.bits-2" / "metrics.h5");
  }
  run.add("eval_math.bits-2", "eval-math", eval_argv(run.dir / "qat.bits-2", "math500"),
          {"qat.bits-2"});
  run.log("eval_math.bits-2", "blocked", 0.0);
  run.add("eval_gsm.bits-2", "eval-math", eval_argv(run.dir / "qat.bits-2", "gsm8k"),
          {"qat.bits-2"});

  // A second evaluation of the W3 model on math500 gets its own row and a note.
  run.add("eval_again.bits-3", "eval-math", eval_argv(run.dir / "qat.bits-3", "math500"),
          {"qat.bits-3"});
  run.summary("eval_again.bits-3", "math500", quant(3, 128), again_math);
  // Stages without a manifest: `rqat traces` wrote its file (done), a stage's directory was
  // removed after it finished (missing), and a rerun of a failed stage is in progress (started).
  run.add("traces", "rqat traces", {"traces", "--out", (run.dir / "traces").string()});
  run.log("traces", "done", 0.5);
  rqat::test::write_bytes(run.dir / "traces", "{}\n");
  rqat::test::write_bytes(run.dir / "logs" / "traces.log", "wrote 1 trace\n");
  run.add("gone", "ptq", {"--out", (run.dir / "gone").string()});
  run.log("gone", "done", 0.5);
  run.add("grpo.bits-3", "grpo", {"--model", (run.dir / "qat.bits-3").string()}, {"qat.bits-3"});
  run.log("grpo.bits-3", "failed", 9.0, 1);
  rqat::test::write_bytes(run.dir / "logs" / "grpo.bits-3.log", "step 1/10\n");
  // Explicit times: file systems with coarse timestamps would otherwise make them equal.
  const auto record_time = fs::last_write_time(run.dir / "logs" / "grpo.bits-3.json");
  fs::last_write_time(run.dir / "logs" / "grpo.bits-3.log", record_time + std::chrono::seconds(5));
  fs::last_write_time(run.dir / "logs" / "traces.log", record_time - std::chrono::seconds(5));
  run.write_plan_file();

  const RunReport report = collect_run_report(run.dir);
  REQUIRE(report.name == "toy");

  SECTION("stage statuses and times") {
    REQUIRE(report.stages.size() == run.plan.stages.size());
    std::map<std::string, std::string> status;
    for (const auto& s : report.stages) status[s.id] = s.status;
    CHECK(status["ptq.bits-3"] == "done");
    CHECK(status["qat.bits-3"] == "skipped");
    CHECK(status["eval_base_math"] == "done");  // manifest, no runner log
    CHECK(status["qat.bits-2"] == "failed");
    CHECK(status["eval_math.bits-2"] == "blocked");
    CHECK(status["eval_gsm.bits-2"] == "missing");
    CHECK(status["traces"] == "done");
    CHECK(status["gone"] == "missing");
    CHECK(status["grpo.bits-3"] == "started");
    CHECK(report.stages[0].seconds == Approx(2.3));
    CHECK(report.stages[0].metrics["mean_relative_error"].get<double>() == Approx(0.0123));
  }

  SECTION("results: rows in plan order, bits, benchmark columns, average") {
    const auto& results = report.results;
    CHECK(results.benchmarks == std::vector<std::string>{"math500", "gsm8k"});
    const auto cells = results_table_cells(results);
    const std::vector<std::vector<std::string>> expected = {
        {"model", "bits", "math500", "gsm8k", "avg"},
        {"RTN W3 + KD", "W3G128", pct(w3_math), pct(w3_gsm), pct((w3_math + w3_gsm) / 2)},
        {"Qwen3-0.6B", "16", pct(base_math), pct(base_gsm), pct((base_math + base_gsm) / 2)},
        {"Teacher, BF16", "16", pct(teacher_math), "", ""},
        // bits from ptq's manifest is unreachable (qat failed): unknown, statuses in the cells.
        {"RTN W2 + KD", "?", "blocked", "missing", ""},
        {"RTN W3 + KD (eval_again.bits-3)", "W3G128", pct(again_math), "", ""}};
    CHECK(cells == expected);
    REQUIRE(report.notes.size() == 1);
    CHECK(report.notes[0].find("eval_math.bits-3 and eval_again.bits-3") != std::string::npos);
    REQUIRE(results.rows[0].cells[0]);
    CHECK(results.rows[0].cells[0]->pass1_stderr == Approx(0.02));
  }

  SECTION("markdown and CSV") {
    const std::string md = report_markdown(report);
    CHECK(md.find("# Run toy\n") == 0);
    CHECK(md.find("15 stage instances: 9 done, 1 skipped, 1 failed, 1 blocked, 2 missing, 1 "
                  "started") != std::string::npos);
    CHECK(md.find("| model | bits | math500 | gsm8k | avg |\n|---|---|---:|---:|---:|\n") !=
          std::string::npos);
    CHECK(md.find(fmt::format("| RTN W3 + KD | W3G128 | {} | {} | {} |\n", pct(w3_math),
                              pct(w3_gsm), pct((w3_math + w3_gsm) / 2))) != std::string::npos);
    CHECK(md.find("| RTN W2 + KD | ? | blocked | missing |  |\n") != std::string::npos);
    // Stage table: the summary metric columns present in some manifest, in their fixed order.
    CHECK(md.find("| id | tool | status | seconds | steps | final_loss | nll | pass@1 | "
                  "mean_relative_error |\n") != std::string::npos);
    CHECK(md.find("| qat.bits-3 | qat-kd | skipped | 0.1 | 10 | 0.5 | 2.125 |  |  |\n") !=
          std::string::npos);
    CHECK(md.find("| qat.bits-2 | qat-kd | failed (3) | 4.0 | 3 | 0.75 |  |  |  |\n") !=
          std::string::npos);
    CHECK(md.find("| ptq.bits-3 | ptq | done | 2.3 |  |  |  |  | 0.0123 |\n") != std::string::npos);

    const std::string csv = csv_table(results_table_cells(report.results));
    CHECK(csv.find("model,bits,math500,gsm8k,avg\n") == 0);
    CHECK(csv.find(fmt::format("\"Teacher, BF16\",16,{},,\n", pct(teacher_math))) !=
          std::string::npos);

    write_report_files(report);
    CHECK(rqat::test::read_bytes(run.dir / "report.md") == md);
    CHECK(rqat::test::read_bytes(run.dir / "report.csv") == csv);
    const std::string stages_csv = rqat::test::read_bytes(run.dir / "stages.csv");
    CHECK(stages_csv.find(
              "id,tool,status,seconds,steps,final_loss,nll,pass@1,mean_relative_error\n") == 0);
    CHECK(stages_csv.find("\ntraces,rqat traces,done,0.5,,,,,\n") != std::string::npos);
    CHECK(stages_csv.find("\ngone,ptq,missing,0.5,,,,,\n") != std::string::npos);
    // A run in progress: the old record's time and exit code are not shown.
    CHECK(stages_csv.find("\ngrpo.bits-3,grpo,started,,,,,,\n") != std::string::npos);
  }
}

TEST_CASE("an evaluation scored with a reward shows its mean reward, with a note") {
  rqat::test::TempDir tmp("run_report_reward");
  FakeRun run(tmp / "run");
  // Study A's score on one model; the other model's evaluation has no reward (pass@1).
  run.add("eval_rl", "eval-math", eval_argv("/models/rl", "math500"), {}, "GRPO");
  run.summary("eval_rl", "math500", nullptr, 0.25);
  Json summary = rqat::io::read_json_file(run.dir / "eval_rl" / "summary.json");
  summary["metrics"]["reward"] = "math_boxed+format_last_box:0.1";
  summary["metrics"]["mean_reward"] = 0.307;
  summary["metrics"]["mean_reward_stderr"] = 0.011;
  rqat::io::write_json_file(run.dir / "eval_rl" / "summary.json", summary);
  run.log("eval_rl", "done", 1.0);
  run.add("eval_base", "eval-math", eval_argv("/models/base", "math500"), {}, "base");
  run.summary("eval_base", "math500", nullptr, 0.125);
  run.log("eval_base", "done", 1.0);
  run.write_plan_file();

  const auto report = collect_run_report(run.dir);
  const auto cells = results_table_cells(report.results);
  const std::vector<std::vector<std::string>> expected = {
      {"model", "bits", "math500"}, {"GRPO", "16", pct(0.307)}, {"base", "16", pct(0.125)}};
  CHECK(cells == expected);
  REQUIRE(report.results.rows[0].cells[0]);
  CHECK(report.results.rows[0].cells[0]->pass1_stderr == Approx(0.011));
  CHECK(report.results.rows[0].cells[0]->reward == "math_boxed+format_last_box:0.1");
  REQUIRE(report.notes.size() == 1);
  CHECK(report.notes[0].find("math_boxed+format_last_box:0.1 show the mean reward x 100") !=
        std::string::npos);
  CHECK(report.notes[0].find("the other cells are pass@1") != std::string::npos);
}

TEST_CASE("differences from the model each row was made from, with the SE of the difference") {
  rqat::test::TempDir tmp("run_report_differences");
  FakeRun run(tmp / "run");
  // teacher (outside the run) -> ptq -> qat -> grpo, each evaluated on one benchmark; the scores
  // and standard errors are set per evaluation.
  auto evaluated = [&](const std::string& id, const fs::path& model, std::vector<std::string> in,
                       const std::string& label, Json q, double pass1, double se) {
    run.add(id, "eval-math", eval_argv(model, "math500"), std::move(in), label);
    run.summary(id, "math500", q, pass1);
    Json summary = rqat::io::read_json_file(run.dir / id / "summary.json");
    summary["metrics"]["pass@1_stderr"] = se;
    rqat::io::write_json_file(run.dir / id / "summary.json", summary);
    run.log(id, "done", 1.0);
  };
  evaluated("eval_teacher", "/models/teacher", {}, "teacher", nullptr, 0.80, 0.03);
  run.add("ptq", "ptq", {"--model", "/models/teacher/"}, {}, "GPTQ");
  run.manifest("ptq", "ptq", {{"quant", quant(2, 32)}}, Json::object());
  run.log("ptq", "done", 1.0);
  evaluated("eval_ptq", run.dir / "ptq", {"ptq"}, "", quant(2, 32), 0.50, 0.04);
  // A model re-imported from a file inside another stage's directory (its GGUF export) was made
  // from that stage's model.
  run.add("ptq_gguf", "rqat convert", {"--model", (run.dir / "ptq" / "model-q2_k.gguf").string()},
          {"ptq"}, "GPTQ (from its GGUF)");
  run.log("ptq_gguf", "done", 1.0);
  evaluated("eval_ptq_gguf", run.dir / "ptq_gguf", {"ptq_gguf"}, "", quant(2, 32), 0.51, 0.04);
  run.add("qat", "qat-kd", {"--model", (run.dir / "ptq").string()}, {"ptq"}, "GPTQ + KD");
  run.log("qat", "done", 1.0);
  evaluated("eval_qat", run.dir / "qat", {"qat"}, "", quant(2, 32), 0.75, 0.03);
  run.add("grpo", "grpo", {"--model", (run.dir / "qat").string()}, {"qat"}, "GPTQ + KD + GRPO");
  run.log("grpo", "done", 1.0);
  evaluated("eval_grpo", run.dir / "grpo", {"grpo"}, "", quant(2, 32), 0.77, 0.03);
  // A model made from one that was never evaluated has no line.
  run.add("other", "qat-sft", {"--model", "/models/elsewhere"}, {}, "elsewhere + SFT");
  run.log("other", "done", 1.0);
  evaluated("eval_other", run.dir / "other", {"other"}, "", quant(2, 32), 0.6, 0.03);
  run.write_plan_file();

  const auto report = collect_run_report(run.dir);
  const auto cells = difference_table_cells(report.results);
  auto diff = [](double a, double b, double sa, double sb) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%+.1f ± %.1f", 100 * (a - b),
                  100 * std::sqrt(sa * sa + sb * sb));
    return std::string(buffer);
  };
  const std::vector<std::vector<std::string>> expected = {
      {"model", "bits", "from", "math500"},
      {"GPTQ", "W2G32", "teacher (16)", diff(0.50, 0.80, 0.04, 0.03)},       // -30.0 ± 5.0
      {"GPTQ (from its GGUF)", "W2G32", "GPTQ (W2G32)", diff(0.51, 0.50, 0.04, 0.04)},
      {"GPTQ + KD", "W2G32", "GPTQ (W2G32)", diff(0.75, 0.50, 0.03, 0.04)},  // +25.0 ± 5.0
      {"GPTQ + KD + GRPO", "W2G32", "GPTQ + KD (W2G32)", diff(0.77, 0.75, 0.03, 0.03)}};
  CHECK(cells == expected);
  CHECK(cells[1][3] == "-30.0 ± 5.0");
  const std::string md = report_markdown(report);
  CHECK(md.find("## Differences") != std::string::npos);
  CHECK(md.find("| GPTQ + KD + GRPO | W2G32 | GPTQ + KD (W2G32) | +2.0 ± 4.2 |") !=
        std::string::npos);
  write_report_files(report);
  CHECK(rqat::test::read_bytes(run.dir / "differences.csv") == csv_table(cells));
}

TEST_CASE("markdown and CSV escape what would break a cell") {
  const std::vector<std::vector<std::string>> cells = {{"a", "b"}, {"x|y", "say \"hi\", twice"}};
  CHECK(rqat::experiment::markdown_table(cells) ==
        "| a | b |\n|---|---|\n| x\\|y | say \"hi\", twice |\n");
  CHECK(rqat::experiment::csv_table(cells) == "a,b\nx|y,\"say \"\"hi\"\", twice\"\n");
}

TEST_CASE("bad run directories and files give one-line errors naming them") {
  rqat::test::TempDir tmp("run_report_errors");
  rqat::test::require_error([&] { collect_run_report(tmp / "absent"); },
                            {"absent", "not a directory"});
  rqat::test::require_error([&] { collect_run_report(tmp.path()); }, {"plan.json"});

  FakeRun run(tmp / "run");
  run.add("eval", "eval-math", eval_argv("/models/m", "math500"));
  run.write_plan_file();
  rqat::test::write_bytes(run.dir / "logs" / "eval.json", "{\"seconds\": 1}");
  rqat::test::require_error([&] { collect_run_report(run.dir); }, {"eval.json", "status"});

  run.log("eval", "done", 1.0);
  run.manifest("eval", "eval-math", Json::object(), Json::object());
  rqat::test::write_bytes(run.dir / "eval" / "summary.json", "{\"metrics\": {}}");
  rqat::test::require_error([&] { collect_run_report(run.dir); }, {"summary.json", "pass@1"});
}

namespace {

// samples.jsonl with `correct[problem][sample]` (and a reward of 1.1 for a correct sample, 0.1
// else).
void write_samples(const fs::path& dir, const std::vector<std::vector<int>>& correct) {
  fs::create_directories(dir);
  std::string text;
  for (size_t p = 0; p < correct.size(); ++p)
    for (size_t s = 0; s < correct[p].size(); ++s)
      text += Json{{"id", fmt::format("p{}", p)},
                   {"sample", s},
                   {"correct", correct[p][s] == 1},
                   {"reward", correct[p][s] == 1 ? 1.1 : 0.1}}
                  .dump() +
              "\n";
  rqat::test::write_bytes(dir / "samples.jsonl", text);
}

// The closed form the report must reproduce: per problem the share correct, d = higher - lower
// (averaged over pairs), mean d and sd(d) / sqrt(n) with the n - 1 sample standard deviation.
std::pair<double, double> closed_form(const std::vector<std::vector<double>>& d_per_pair) {
  const size_t n = d_per_pair.front().size();
  std::vector<double> d(n, 0.0);
  for (const auto& pair : d_per_pair)
    for (size_t i = 0; i < n; ++i) d[i] += pair[i] / static_cast<double>(d_per_pair.size());
  double mean = 0;
  for (double v : d) mean += v / static_cast<double>(n);
  double squares = 0;
  for (double v : d) squares += (v - mean) * (v - mean);
  return {mean, std::sqrt(squares / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n))};
}

}  // namespace

TEST_CASE("paired_difference: the mean and paired SE of per-problem differences (closed form)") {
  // 5 problems x 2 samples: shares 1, .5, 0, 1, .5 against .5, 0, 0, 1, 0.
  const ProblemScores high = {{"a", 1.0}, {"b", 0.5}, {"c", 0.0}, {"d", 1.0}, {"e", 0.5}};
  const ProblemScores low = {{"a", 0.5}, {"b", 0.0}, {"c", 0.0}, {"d", 1.0}, {"e", 0.0}};
  const auto d = paired_difference({{"", high, low}});
  CHECK(d.pairs == 1);
  CHECK(d.problems == 5);
  CHECK(d.difference == Approx(0.3).epsilon(1e-12));
  // d = .5 .5 0 0 .5: squares about 0.3 sum to 0.3, sd = sqrt(0.3 / 4), SE = sd / sqrt(5).
  CHECK(d.standard_error == Approx(std::sqrt(0.3 / 4) / std::sqrt(5.0)).epsilon(1e-12));
  CHECK(finding_verdict(d.difference, d.standard_error) == "shown");  // z = 2.449
  CHECK(finding_verdict(-d.difference, d.standard_error) == "refuted");
  CHECK(finding_verdict(0.19, 0.1) == "undecided");
  CHECK(finding_verdict(0.2, 0.1) == "shown");  // exactly 2 SE decides
  CHECK(finding_verdict(0.01, 0.0) == "shown");
  CHECK(finding_verdict(0.0, 0.0) == "undecided");
  // A 3-point difference is 2 SE at n (SE / 0.015)^2 problems: 5 x (0.12247 / 0.015)^2 = 333.3.
  CHECK(problems_to_decide(d, 3.0) == 334);

  // The paired SE is below the SE of two independent means when the arms agree on what is hard.
  auto se_of = [](const ProblemScores& s) {
    double mean = 0, squares = 0;
    for (const auto& [id, v] : s) mean += v / static_cast<double>(s.size());
    for (const auto& [id, v] : s) squares += (v - mean) * (v - mean);
    return std::sqrt(squares / static_cast<double>(s.size() - 1)) / std::sqrt(double(s.size()));
  };
  CHECK(d.standard_error < std::hypot(se_of(high), se_of(low)));

  // Problems missing on either side are left out; none in common is an error.
  const auto partial = paired_difference({{"", high, {{"a", 0.0}, {"b", 0.0}, {"z", 1.0}}}});
  CHECK(partial.problems == 2);
  CHECK(partial.difference == Approx(0.75));
  rqat::test::require_error([&] { paired_difference({{"", high, {{"z", 1.0}}}}); },
                            {"share no problem"});
}

TEST_CASE("findings in the report: pairs matched on the other sweep values, verdicts, not run") {
  rqat::test::TempDir tmp("findings");
  FakeRun run(tmp.path() / "run");
  run.plan.sweep_variables = {"bits", "objective"};
  // eval_qat for bits 2, 3 x objective kd, sft; eval_teacher once.
  std::mt19937 rng(20261204);
  std::bernoulli_distribution coin(0.5);
  std::map<std::string, std::vector<std::vector<int>>> outcomes;
  const int problems = 40, samples = 3;
  for (const std::string bits : {"2", "3"})
    for (const std::string objective : {"kd", "sft"}) {
      const std::string id = "eval_qat.bits-" + bits + ".objective-" + objective;
      auto& s = run.add(id, "eval-math", eval_argv(run.dir / "m", "tiny"));
      s.point = {{"bits", bits}, {"objective", objective}};
      std::vector<std::vector<int>> correct(problems, std::vector<int>(samples));
      for (auto& p : correct)
        for (auto& c : p) c = coin(rng) ? 1 : 0;
      outcomes[id] = correct;
      write_samples(run.dir / id, correct);
    }
  run.add("eval_teacher", "eval-math", eval_argv(run.dir / "t", "tiny"));
  std::vector<std::vector<int>> teacher(problems, std::vector<int>(samples, 1));
  write_samples(run.dir / "eval_teacher", teacher);
  outcomes["eval_teacher"] = teacher;
  auto& missing = run.add("eval_grpo.bits-2.objective-kd", "eval-math", eval_argv(run.dir / "g", "tiny"));
  missing.point = {{"bits", "2"}, {"objective", "kd"}};

  run.plan.findings = {
      {"kd_vs_sft", "KD beats SFT", "accuracy", {"eval_qat", {{"objective", "kd"}}},
       {"eval_qat", {{"objective", "sft"}}}},
      {"teacher_vs_qat", "QAT loses to the teacher", "reward", {"eval_teacher", {}},
       {"eval_qat", {}}},
      {"grpo", "GRPO after KD", "accuracy", {"eval_grpo", {}}, {"eval_qat", {{"objective", "kd"}}}}};
  run.write_plan_file();
  const auto report = collect_run_report(run.dir);
  REQUIRE(report.findings.size() == 3);

  auto share = [&](const std::string& id, int p, bool reward) {
    double sum = 0;
    for (int c : outcomes[id][p]) sum += reward ? (c ? 1.1 : 0.1) : c;
    return sum / samples;
  };
  // KD vs SFT: 2 pairs (bits 2 and 3), never across bits.
  std::vector<std::vector<double>> kd_sft;
  for (const std::string bits : {"2", "3"}) {
    std::vector<double> d;
    for (int p = 0; p < problems; ++p)
      d.push_back(share("eval_qat.bits-" + bits + ".objective-kd", p, false) -
                  share("eval_qat.bits-" + bits + ".objective-sft", p, false));
    kd_sft.push_back(d);
  }
  const auto [mean, se] = closed_form(kd_sft);
  const auto& kd = report.findings[0];
  REQUIRE(kd.difference.has_value());
  CHECK(kd.difference->pairs == 2);
  CHECK(kd.difference->problems == problems);
  CHECK(kd.difference->difference == Approx(mean).margin(1e-12));
  CHECK(kd.difference->standard_error == Approx(se).epsilon(1e-12));
  CHECK(kd.verdict == finding_verdict(mean, se));
  // The teacher pairs with every eval_qat instance (it has no sweep values), on the reward.
  std::vector<std::vector<double>> teacher_qat;
  for (const auto& [id, correct] : outcomes) {
    if (id == "eval_teacher") continue;
    std::vector<double> d;
    for (int p = 0; p < problems; ++p) d.push_back(share("eval_teacher", p, true) - share(id, p, true));
    teacher_qat.push_back(d);
  }
  const auto [t_mean, t_se] = closed_form(teacher_qat);
  const auto& tq = report.findings[1];
  CHECK(tq.difference->pairs == 4);
  CHECK(tq.difference->difference == Approx(t_mean).margin(1e-12));
  CHECK(tq.difference->standard_error == Approx(t_se).epsilon(1e-12));
  CHECK(tq.verdict == "shown");
  CHECK(report.findings[2].verdict == "not run");
  CHECK_THAT(report.findings[2].note, Catch::Contains("eval_grpo.bits-2.objective-kd"));

  const std::string markdown = report_markdown(report);
  CHECK_THAT(markdown, Catch::Contains("## Findings"));
  CHECK_THAT(markdown, Catch::Contains("| kd_vs_sft | KD beats SFT | accuracy | 2 | 40 |"));
  write_report_files(report);
  CHECK(fs::exists(run.dir / "findings.csv"));
}

namespace {

// Per-problem rewards of one instance: one sample per problem, its reward the problem's score.
void write_reward_samples(const fs::path& dir, const std::vector<double>& rewards) {
  fs::create_directories(dir);
  std::string text;
  for (size_t p = 0; p < rewards.size(); ++p)
    text += Json{{"id", fmt::format("p{}", p)}, {"sample", 0}, {"correct", rewards[p] > 0.5},
                 {"reward", rewards[p]}}
                .dump() +
            "\n";
  rqat::test::write_bytes(dir / "samples.jsonl", text);
}

double sample_var(const std::vector<double>& v) {
  double mean = 0, squares = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) squares += (x - mean) * (x - mean);
  return squares / static_cast<double>(v.size() - 1);
}

// A run of `seeds` training seeds: eval_qat (seeded, objective kd and sft) and eval_teacher (no
// seed). KD's reward on problem p at seed s is c(p) + a(s) + b(p), SFT's c(p): the KD - SFT
// difference is a(s) + b(p) exactly, with no seed x problem interaction.
struct SeededRun {
  FakeRun run;
  std::vector<double> a, b;
  SeededRun(const fs::path& dir, std::vector<double> seed_effects, std::vector<double> problem_effects,
            uint32_t rng_seed)
      : run(dir), a(std::move(seed_effects)), b(std::move(problem_effects)) {
    run.plan.sweep_variables = {"objective", "seed"};
    run.plan.seed_variable = "seed";
    std::mt19937 rng(rng_seed);
    std::uniform_real_distribution<double> base(0.0, 0.5);
    std::vector<double> c(b.size());
    for (auto& v : c) v = base(rng);
    for (size_t s = 0; s < a.size(); ++s)
      for (const std::string objective : {"kd", "sft"}) {
        const std::string id =
            "eval_qat.objective-" + objective + ".seed-" + std::to_string(s);
        auto& inst = run.add(id, "eval-math", eval_argv(run.dir / "m", "tiny"));
        inst.point = {{"objective", objective}, {"seed", std::to_string(s)}};
        std::vector<double> rewards = c;
        if (objective == "kd")
          for (size_t p = 0; p < b.size(); ++p) rewards[p] += a[s] + b[p];
        write_reward_samples(run.dir / id, rewards);
      }
    run.add("eval_teacher", "eval-math", eval_argv(run.dir / "t", "tiny"));
    write_reward_samples(run.dir / "eval_teacher", std::vector<double>(b.size(), 1.0));
    run.add("eval_ptq", "eval-math", eval_argv(run.dir / "p", "tiny"));
    write_reward_samples(run.dir / "eval_ptq", c);
    run.plan.findings = {{"kd_vs_sft", "KD beats SFT", "reward", {"eval_qat", {{"objective", "kd"}}},
                          {"eval_qat", {{"objective", "sft"}}}},
                         {"teacher_vs_sft", "the teacher beats SFT", "reward", {"eval_teacher", {}},
                          {"eval_qat", {{"objective", "sft"}}}},
                         {"ptq_damages", "the teacher beats PTQ", "reward",
                          {"eval_teacher", {}}, {"eval_ptq", {}}}};
    run.write_plan_file();
  }
};

}  // namespace

TEST_CASE("findings over training seeds: SE from the seeds' and the problems' variance (closed form)") {
  rqat::test::TempDir tmp("findings-seeds");
  std::mt19937 rng(20261205);
  std::normal_distribution<double> noise(0.0, 0.1);
  const std::vector<double> a = {0.02, 0.05, 0.035};  // seeds that agree on a positive effect
  std::vector<double> b(60);
  for (auto& v : b) v = noise(rng);
  SeededRun seeded(tmp.path() / "run", a, b, 7);
  const auto report = collect_run_report(seeded.run.dir);
  REQUIRE(report.findings.size() == 3);
  const auto& kd = report.findings[0];
  REQUIRE(kd.difference.has_value());
  const auto& d = *kd.difference;
  double mean_a = 0, mean_b = 0;
  for (double v : a) mean_a += v / 3.0;
  for (double v : b) mean_b += v / 60.0;
  CHECK(d.pairs == 3);
  CHECK(d.seeds == 3);
  CHECK(d.problems == 60);
  CHECK(d.difference == Approx(mean_a + mean_b).margin(1e-12));
  // d = a(s) + b(p): the residual is 0, so Var = var(a) / S + var(b) / P exactly.
  CHECK(d.standard_error == Approx(std::sqrt(sample_var(a) / 3.0 + sample_var(b) / 60.0)).epsilon(1e-9));
  CHECK(d.seed_standard_error == Approx(std::sqrt(sample_var(a) / 3.0)).epsilon(1e-9));
  CHECK(d.problem_standard_error == Approx(std::sqrt(sample_var(b) / 60.0)).epsilon(1e-9));
  REQUIRE(d.per_seed.size() == 3);
  for (size_t s = 0; s < 3; ++s) {
    CHECK(d.per_seed[s].seed == std::to_string(s));
    CHECK(d.per_seed[s].difference == Approx(a[s] + mean_b).margin(1e-12));
  }
  CHECK(kd.standard_error_over == "seeds+problems");
  CHECK(kd.verdict == finding_verdict(d.difference, d.standard_error));
  // The teacher (no seed) pairs with each seed's SFT model: three seed groups.
  CHECK(report.findings[1].difference->seeds == 3);
  CHECK(report.findings[1].standard_error_over == "seeds+problems");
  // No arm depends on a seed: one group, the problem-only SE.
  CHECK(report.findings[2].difference->seeds == 1);
  CHECK(report.findings[2].standard_error_over == "problems");

  // The report shows each seed's difference beside the verdict.
  const std::string markdown = report_markdown(report);
  const std::string per_seed = fmt::format("{:+.1f} {:+.1f} {:+.1f}", 100 * (a[0] + mean_b),
                                           100 * (a[1] + mean_b), 100 * (a[2] + mean_b));
  CHECK_THAT(markdown, Catch::Contains("| " + per_seed + " |"));
  CHECK_THAT(markdown, Catch::Contains("seeds+problems"));

  // With interaction (noise per seed and problem) the estimator is the two-way ANOVA's:
  // (MS_seed + max(0, MS_problem - MS_residual)) / (S P), computed here from its definition.
  std::vector<std::vector<double>> dsp(3, std::vector<double>(60));
  std::vector<SeededPair> pairs;
  for (size_t s = 0; s < 3; ++s) {
    SeededPair pair{std::to_string(s), {}, {}};
    for (size_t p = 0; p < 60; ++p) {
      dsp[s][p] = a[s] + b[p] + noise(rng);
      pair.higher[fmt::format("p{}", p)] = dsp[s][p] + 0.25;
      pair.lower[fmt::format("p{}", p)] = 0.25;
    }
    pairs.push_back(pair);
  }
  std::vector<double> seed_means(3, 0.0), problem_means(60, 0.0);
  double grand = 0;
  for (size_t s = 0; s < 3; ++s)
    for (size_t p = 0; p < 60; ++p) {
      seed_means[s] += dsp[s][p] / 60.0;
      problem_means[p] += dsp[s][p] / 3.0;
      grand += dsp[s][p] / 180.0;
    }
  double ss_seed = 0, ss_problem = 0, ss_residual = 0;
  for (size_t s = 0; s < 3; ++s) ss_seed += 60.0 * (seed_means[s] - grand) * (seed_means[s] - grand);
  for (size_t p = 0; p < 60; ++p)
    ss_problem += 3.0 * (problem_means[p] - grand) * (problem_means[p] - grand);
  for (size_t s = 0; s < 3; ++s)
    for (size_t p = 0; p < 60; ++p) {
      const double r = dsp[s][p] - seed_means[s] - problem_means[p] + grand;
      ss_residual += r * r;
    }
  const double ms_seed = ss_seed / 2.0, ms_problem = ss_problem / 59.0,
               ms_residual = ss_residual / (2.0 * 59.0);
  const auto mixed = paired_difference(pairs);
  CHECK(mixed.difference == Approx(grand).margin(1e-12));
  CHECK(mixed.standard_error ==
        Approx(std::sqrt((ms_seed + std::max(0.0, ms_problem - ms_residual)) / 180.0)).epsilon(1e-9));
}

TEST_CASE("findings over training seeds: a difference that one seed drives is not shown") {
  rqat::test::TempDir tmp("findings-one-seed");
  std::mt19937 rng(4);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> b(100);
  for (auto& v : b) v = noise(rng);
  // Two seeds see nothing, the third +30 points.
  SeededRun seeded(tmp.path() / "run", {0.0, 0.0, 0.3}, b, 11);
  const auto report = collect_run_report(seeded.run.dir);
  const auto& d = *report.findings[0].difference;
  // Problems alone would call it shown by far (the pooled problem-only SE is about half a point)...
  std::vector<double> pooled(100);
  for (size_t p = 0; p < 100; ++p) pooled[p] = 0.1 + b[p];
  const double problem_only = std::sqrt(sample_var(pooled) / 100.0);
  CHECK(d.difference / problem_only > 10);
  // ...but the seeds' spread (sd 0.173 / sqrt 3 = 0.1) keeps it at z about 1.
  CHECK(d.seed_standard_error == Approx(0.1).epsilon(1e-9));
  CHECK(report.findings[0].verdict == "undecided");
  // No number of problems decides it: the seeds' part alone is above 3 points / 2.
  CHECK_FALSE(problems_to_decide(d, 3.0).has_value());
  CHECK_THAT(report_markdown(report), Catch::Contains("more seeds"));
}

TEST_CASE("results over training seeds: one row per model, the seeds' mean and each seed") {
  rqat::test::TempDir tmp("results-seeds");
  FakeRun run(tmp.path() / "run");
  run.plan.sweep_variables = {"seed"};
  run.plan.seed_variable = "seed";
  const std::vector<double> scores = {0.80, 0.86, 0.83};
  for (size_t s = 0; s < scores.size(); ++s) {
    const std::string id = "eval_qat.seed-" + std::to_string(s);
    auto& inst = run.add(id, "eval-math", eval_argv(run.dir / "m", "tiny"), {}, "student");
    inst.point = {{"seed", std::to_string(s)}};
    run.summary(id, "tiny", quant(2, 32), scores[s]);
    run.log(id, "done", 1.0);
  }
  run.write_plan_file();
  auto report = collect_run_report(run.dir);
  REQUIRE(report.results.rows.size() == 1);
  const auto& cell = *report.results.rows[0].cells[0];
  CHECK(*cell.pass1 == Approx(0.83));
  // sqrt(var(0.80, 0.86, 0.83) / 3 + 0.02^2): the seeds' spread and each seed's SE.
  CHECK(*cell.pass1_stderr == Approx(std::sqrt(0.0009 / 3 + 0.0004)).epsilon(1e-9));
  const auto cells = results_table_cells(report.results);
  CHECK(cells[1][2] == "83.0 (80.0 86.0 83.0)");
  CHECK(report.notes.empty());

  // A seed not finished: the row shows its status, no mean over the finished seeds only.
  fs::remove(run.dir / "eval_qat.seed-2" / "summary.json");
  fs::remove(run.dir / "logs" / "eval_qat.seed-2.json");
  report = collect_run_report(run.dir);
  CHECK_FALSE(report.results.rows[0].cells[0]->pass1.has_value());
}
