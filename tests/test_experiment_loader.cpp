// Experiment files (docs/experiments.md): sweep expansion, sharing of identical stage instances,
// interpolation, validation errors with FILE:LINE:COLUMN, and the plan's JSON form.
#include "catch.h"

#include <algorithm>
#include <set>

#include "experiment/experiment_loader.h"
#include "experiment/interpolation.h"
#include "experiment/sweep.h"
#include "io/error.h"
#include "io/json_file.h"
#include "test_util.h"

using namespace rqat::experiment;
namespace io = rqat::io;
using rqat::Error;
using rqat::test::require_error;
using rqat::test::TempDir;

namespace {

ExperimentPlan plan_of(const TempDir& dir, const std::string& yaml,
                       std::vector<std::string> overrides = {}) {
  rqat::test::write_bytes(dir / "exp.yaml", yaml);
  return load_experiment_plan({dir / "exp.yaml", std::move(overrides), dir / "run"});
}

std::vector<std::string> ids_of(const ExperimentPlan& plan, const std::string& stage) {
  std::vector<std::string> ids;
  for (const auto& s : plan.stages)
    if (s.stage == stage) ids.push_back(s.id);
  return ids;
}

const std::string kSweep = R"(name: sweep
vars:
  steps: 10
  data: ${experiment_dir}/train.jsonl
sweep:
  grid:
    bits: [2, 3]
    init: [rtn, gptq]
  zip:
    objective: [sft, kd]
    lr: [1e-4, 5e-5]
stages:
  ptq:
    tool: ptq
    args: {model: "${run_dir}/teacher", method: "${init}", bits: "${bits}", group-size: 32}
  qat:
    tool: qat-${objective}
    inputs: {model: ptq}
    args: {steps: "${steps}", lr: "${lr}", data: "${data}"}
    label: "${init} W${bits} + ${objective}"
  grpo:
    tool: grpo
    inputs: {model: qat}
    only: {objective: kd}
  eval_grpo:
    tool: eval-math
    inputs: {model: grpo}
)";

}  // namespace

TEST_CASE("expand_sweep crosses the grid with the zip, first axis outermost") {
  Sweep sweep;
  sweep.grid = {{"a", {"1", "2"}}, {"b", {"x", "y", "z"}}};
  sweep.zip = {{"c", {"p", "q"}}, {"d", {"7", "8"}}};
  const auto points = expand_sweep(sweep);
  REQUIRE(points.size() == 2 * 3 * 2);
  CHECK(points[0] == SweepPoint{{"a", "1"}, {"b", "x"}, {"c", "p"}, {"d", "7"}});
  CHECK(points[1] == SweepPoint{{"a", "1"}, {"b", "x"}, {"c", "q"}, {"d", "8"}});
  CHECK(points[11] == SweepPoint{{"a", "2"}, {"b", "z"}, {"c", "q"}, {"d", "8"}});
  std::set<SweepPoint> unique(points.begin(), points.end());
  CHECK(unique.size() == points.size());
  CHECK(expand_sweep(Sweep{}).size() == 1);
}

TEST_CASE("identical stages across sweep points are shared; ids name what a stage depends on") {
  TempDir dir("exp-share");
  const auto plan = plan_of(dir, kSweep);
  CHECK(plan.sweep_variables == std::vector<std::string>{"bits", "init", "objective", "lr"});
  // 8 points: ptq depends on bits x init only (4), qat on all (8), grpo only where objective is kd.
  CHECK(ids_of(plan, "ptq") ==
        std::vector<std::string>{"ptq.bits-2.init-rtn", "ptq.bits-2.init-gptq",
                                 "ptq.bits-3.init-rtn", "ptq.bits-3.init-gptq"});
  const auto qat = ids_of(plan, "qat");
  REQUIRE(qat.size() == 8);
  CHECK(qat[0] == "qat.bits-2.init-rtn.objective-sft.lr-1e-4");
  CHECK(ids_of(plan, "grpo").size() == 4);
  for (const auto& id : ids_of(plan, "grpo")) CHECK(id.find("objective-kd") != std::string::npos);
  // A stage whose input `only` leaves out is left out with it.
  CHECK(ids_of(plan, "eval_grpo").size() == 4);

  const auto* kd = plan.find("qat.bits-3.init-gptq.objective-kd.lr-5e-5");
  REQUIRE(kd);
  CHECK(kd->program == "qat-kd");
  CHECK(kd->inputs == std::vector<std::string>{"ptq.bits-3.init-gptq"});
  CHECK(kd->label == "gptq W3 + kd");
  const std::vector<std::string> argv = {
      "--model", (dir / "run" / "ptq.bits-3.init-gptq").string(),
      "--steps", "10",
      "--lr",    "5e-5",
      "--data",  (dir / "train.jsonl").lexically_normal().string(),
      "--out",   (dir / "run" / "qat.bits-3.init-gptq.objective-kd.lr-5e-5").string()};
  CHECK(kd->argv == argv);
  // Inputs come before the instances that need them.
  for (size_t i = 0; i < plan.stages.size(); ++i)
    for (const auto& input : plan.stages[i].inputs) {
      const auto at = std::find_if(plan.stages.begin(), plan.stages.end(),
                                   [&](const auto& s) { return s.id == input; });
      REQUIRE(at != plan.stages.end());
      CHECK(at - plan.stages.begin() < static_cast<long>(i));
    }
  // A missing data file is reported with where it was written (the variable's use in qat.args).
  REQUIRE(kd->missing_paths.size() == 1);
  INFO(kd->missing_paths[0]);
  CHECK(kd->missing_paths[0].find("exp.yaml:19:") != std::string::npos);
}

TEST_CASE("--set overrides variables and document paths, lists included") {
  TempDir dir("exp-set");
  const auto plan =
      plan_of(dir, kSweep, {"steps=3", "sweep.grid.bits=[4]", "stages.qat.args.lr=0.5"});
  CHECK(ids_of(plan, "ptq").size() == 2);
  const auto* qat = plan.find("qat.bits-4.init-rtn.objective-sft");  // lr no longer varies it
  REQUIRE(qat);
  CHECK(std::count(qat->argv.begin(), qat->argv.end(), "0.5") == 1);
  CHECK(std::count(qat->argv.begin(), qat->argv.end(), "3") == 1);
}

TEST_CASE(
    "arguments: booleans, nulls, lists, defaults, list variables, positional and stage refs") {
  TempDir dir("exp-args");
  const auto plan = plan_of(dir, R"(name: args
vars:
  ks: [1, 4]
  nested: "${inner}-x"
  inner: "${name_part}"
  name_part: "$${literal}"
defaults:
  eval-math: {benchmark: math500, limit: 5, quiet: true}
stages:
  teacher:
    tool: eval-math
    args: {limit: 7, k: "${ks}", protocol: null, no-chat-template: false, instruction: "${nested}"}
  traces:
    tool: rqat traces
    args: {out: false, max-per-problem: 2}
    positional: ["${stage:teacher}/samples.jsonl"]
)");
  const auto* teacher = plan.find("teacher");
  REQUIRE(teacher);
  const std::vector<std::string> argv = {"--benchmark",
                                         "math500",
                                         "--limit",
                                         "7",
                                         "--quiet",
                                         "--k",
                                         "1",
                                         "--k",
                                         "4",
                                         "--instruction",
                                         "${literal}-x",
                                         "--out",
                                         (dir / "run" / "teacher").string()};
  CHECK(teacher->argv == argv);
  const auto* traces = plan.find("traces");
  REQUIRE(traces);
  CHECK(traces->program == "rqat");
  CHECK(traces->inputs == std::vector<std::string>{"teacher"});
  CHECK(traces->argv ==
        std::vector<std::string>{"traces", "--max-per-problem", "2",
                                 (dir / "run" / "teacher" / "samples.jsonl").string()});
}

TEST_CASE(
    "a stage overriding a default leaves it alone for the others; switches and stage paths "
    "come through variables") {
  TempDir dir("exp-defaults");
  const auto plan = plan_of(dir, R"(name: defaults
vars:
  sym: true
  asym: false
  traces: ${stage:first}/traces.jsonl
defaults:
  ptq: {bits: 4, group-size: 32}
stages:
  later:
    tool: ptq
    args: {data: "${traces}"}
  first:
    tool: ptq
    args: {bits: 2, sym: "${sym}", true-sym: "${asym}"}
)");
  // `later` names `first` only through a variable, yet runs after it.
  REQUIRE(plan.stages.size() == 2);
  CHECK(plan.stages[0].id == "first");
  CHECK(plan.stages[1].inputs == std::vector<std::string>{"first"});
  CHECK(plan.stages[0].argv == std::vector<std::string>{"--bits", "2", "--group-size", "32",
                                                        "--sym", "--out",
                                                        (dir / "run" / "first").string()});
  CHECK(plan.stages[1].argv ==
        std::vector<std::string>{"--bits", "4", "--group-size", "32", "--data",
                                 (dir / "run" / "first" / "traces.jsonl").string(), "--out",
                                 (dir / "run" / "later").string()});
}

TEST_CASE("a sweep's true/false is a switch in the stage it reaches") {
  TempDir dir("exp-sweep-switch");
  const auto plan = plan_of(dir, R"(name: sweep-switch
sweep:
  zip:
    act: [false, true]
stages:
  ptq:
    tool: ptq
    args: {act-order: "${act}", bits: 2}
)");
  REQUIRE(plan.stages.size() == 2);
  CHECK(plan.stages[0].argv ==
        std::vector<std::string>{"--bits", "2", "--out", (dir / "run" / "ptq.act-false").string()});
  CHECK(plan.stages[1].argv == std::vector<std::string>{"--act-order", "--bits", "2", "--out",
                                                        (dir / "run" / "ptq.act-true").string()});
}

TEST_CASE("resources: slurm.default, then the tool's, then the stage's") {
  TempDir dir("exp-res");
  const auto plan = plan_of(dir, R"(name: res
slurm:
  partition: gpu
  setup: ["module load cuda"]
  default: {gpus: 1, time: "01:00:00", cpus: 8}
  tools:
    qat-kd: {gpus: 8, time: "24:00:00"}
stages:
  a: {tool: qat-kd, resources: {nodes: 2}}
  b: {tool: ptq}
)");
  const auto& a = plan.find("a")->resources;
  CHECK(a.nodes == 2);
  CHECK(a.gpus == 8);
  CHECK(a.cpus == 8);
  CHECK(a.time == "24:00:00");
  CHECK(a.partition == "gpu");
  CHECK(plan.find("b")->resources.gpus == 1);
  CHECK(plan.slurm_setup == std::vector<std::string>{"module load cuda"});
}

TEST_CASE("validation errors name the file, line and column") {
  TempDir dir("exp-errors");
  const auto file = (dir / "exp.yaml").string();
  auto fails = [&](const std::string& yaml, std::initializer_list<std::string> needles,
                   std::vector<std::string> overrides = {}) {
    require_error([&] { plan_of(dir, yaml, overrides); }, needles);
  };
  fails("name: x\nstages:\n  a:\n    tool: ptq\n    args: {bits: \"${nope}\"}\n",
        {file + ":5:18", "stages.a.args.bits", "unknown variable 'nope'"});
  fails("name: x\nstages:\n  a:\n    tool: ptq\n    argz: {}\n",
        {file + ":5:5", "stages.a.argz", "unknown key"});
  fails("name: x\nstagez: {}\n", {file + ":2:1", "unknown key"});
  fails("name: x\nstages:\n  a:\n    tool: ptq\n    args: {bits: {x: 1}}\n",
        {file + ":5:18", "stages.a.args.bits", "not a mapping"});
  fails("name: x\nstages:\n  a:\n    tool: ptq\n    inputs: {model: b}\n",
        {file + ":3:3", "needs stage 'b', which does not exist"});
  fails(
      "name: x\nstages:\n  a: {tool: ptq, inputs: {model: b}}\n  b: {tool: ptq, inputs: {model: "
      "c}}\n"
      "  c: {tool: ptq, positional: [\"${stage:a}/x\"]}\n",
      {file + ":", "dependency cycle: a -> b -> c -> a"});
  fails("name: x\nsweep:\n  zip:\n    a: [1, 2]\n    b: [1, 2, 3]\n",
        {file + ":5:8", "zip lists must have one length"});
  fails("name: x\nstages:\n  a: {tool: quantize}\n", {file + ":3:13", "unknown tool 'quantize'"});
  fails("name: x\nstages:\n  a: {tool: ptq, resources: {gpus: two}}\n",
        {file + ":3:36", "expected a non-negative integer"});
  fails(
      "name: x\nvars: {a: \"${b}\", b: \"${a}\"}\nstages:\n  s: {tool: ptq, args: {x: \"${a}\"}}\n",
      {"cycle: a -> b -> a"});
  fails("name: x\nvars: {l: [1, 2]}\nstages:\n  s: {tool: ptq, args: {x: \"a${l}\"}}\n",
        {file + ":4:28", "is a list"});
  fails("name: x\nstages:\n  a: {tool: ptq\n", {file + ":", "end of map flow not found"});
  fails("name: x\nstages:\n  a: {tool: ptq, args: {bits: 3}}\n",
        {"--set stages.a.args.bits", "unknown variable 'q'"}, {"stages.a.args.bits=${q}"});
  fails("name: x\nstages:\n  a: {tool: rqat}\n", {file + ":3:13", "needs one subcommand"});
  fails(
      "name: x\nsweep: {grid: {b: [1, 2]}}\nstages:\n  a: {tool: ptq, args: {out: o, bits: "
      "\"${b}\"}}\n",
      {"both write --out o"});
  fails(
      "name: x\nsweep: {grid: {b: [1, 2]}}\nstages:\n  a: {tool: ptq}\n  e: {tool: eval-math, "
      "inputs: {model: a}, only: {c: 1}}\n",
      {file + ":5:54", "neither a variable nor swept"});
}

TEST_CASE("interpolation primitives") {
  auto upper = [](const std::string& s) { return "<" + s + ">"; };
  CHECK(interpolate("a${b}c${d}", upper) == "a<b>c<d>");
  CHECK(interpolate("$${b} ${c}", upper) == "${b} <c>");
  CHECK(sole_reference("${bits}") == std::optional<std::string>("bits"));
  CHECK_FALSE(sole_reference("${a}${b}").has_value());
  CHECK(references_in("x ${stage:a}/y ${z}") == std::vector<std::string>{"stage:a", "z"});
  CHECK_THROWS_AS(interpolate("${open", upper), InterpolationError);
  CHECK_THROWS_AS(interpolate("${}", upper), InterpolationError);
}

TEST_CASE("plan.json round-trips") {
  TempDir dir("exp-json");
  const auto plan = plan_of(dir, kSweep);
  write_plan(dir / "plan.json", plan);
  const auto back = read_plan(dir / "plan.json");
  CHECK(plan_to_json(back) == plan_to_json(plan));
  REQUIRE(back.stages.size() == plan.stages.size());
  CHECK(back.stages[5].point == plan.stages[5].point);
}

TEST_CASE("plan.json of the wrong shape: the error names the file and the field") {
  TempDir dir("exp-json-bad");
  const auto plan = plan_of(dir, kSweep);
  const io::Json good = plan_to_json(plan);
  const auto error_of = [&](const io::Json& json) -> std::string {
    io::write_json_file(dir / "plan.json", json);
    try {
      read_plan(dir / "plan.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string file = (dir / "plan.json").string() + ": ";
  io::Json bad = good;
  bad["stages"][3]["id"] = 5;
  CHECK(error_of(bad) == file + "stages[3].id: expected a string, got a number (5)");
  bad = good;
  bad["stages"][1].erase("argv");
  CHECK(error_of(bad) == file + "stages[1].argv: missing");
  bad = good;
  bad["stages"][0]["argv"] = io::Json::array({"--bits", 2});
  CHECK(error_of(bad) ==
        file + "stages[0].argv: expected an array of strings, got an array ([\"--bits\",2])");
  bad = good;
  bad["stages"][2]["point"]["bits"] = 3;
  CHECK(error_of(bad) == file + "stages[2].point.bits: expected a string, got a number (3)");
  bad = good;
  bad["stages"][0]["resources"]["gpus"] = "two";
  CHECK(error_of(bad) ==
        file + "stages[0].resources.gpus: expected a whole number, got a string (\"two\")");
  bad = good;
  bad["findings"] = io::Json::array({{{"name", "f"}, {"higher", {{"stage", 1}}}}});
  CHECK(error_of(bad) == file + "findings[0].higher.stage: expected a string, got a number (1)");
  bad = good;
  bad.erase("name");
  CHECK(error_of(bad) == file + "name: missing");
  CHECK(error_of(io::Json::array({1})) ==
        file + "the file: expected an object, got an array ([1])");
  bad = good;
  bad["stages"] = "none";
  CHECK(error_of(bad) == file + "stages: expected an array, got a string");
  CHECK(error_of(good) == "no error");
}

TEST_CASE("findings: arms read, checked against the expanded stages, carried in plan.json") {
  TempDir dir("exp-findings");
  const std::string yaml = kSweep + R"yaml(  eval_qat:
    tool: eval-math
    inputs: {model: qat}
findings:
  kd_beats_sft:
    claim: "KD beats SFT (Reasoning-QAT)"
    higher: {stage: eval_qat, where: {objective: kd}}
    lower: {stage: eval_qat, where: {objective: sft}}
  grpo_after_kd:
    metric: reward
    higher: {stage: eval_grpo}
    lower: {stage: eval_qat, where: {objective: kd}}
)yaml";
  const auto plan = plan_of(dir, yaml);
  REQUIRE(plan.findings.size() == 2);
  const auto& kd = plan.findings[0];
  CHECK(kd.name == "kd_beats_sft");
  CHECK(kd.claim == "KD beats SFT (Reasoning-QAT)");
  CHECK(kd.metric == "accuracy");
  CHECK(kd.higher.stage == "eval_qat");
  CHECK(kd.higher.where == std::vector<std::pair<std::string, std::string>>{{"objective", "kd"}});
  CHECK(plan.findings[1].metric == "reward");
  CHECK(plan.findings[1].higher.where.empty());
  // plan.json keeps them for `rqat report`.
  write_plan(dir / "plan.json", plan);
  const auto back = read_plan(dir / "plan.json");
  REQUIRE(back.findings.size() == 2);
  CHECK(back.findings[1].lower.where == plan.findings[1].lower.where);
  CHECK(back.findings[0].claim == kd.claim);
  // A sweep narrowed with --set may leave an arm without instances: the report says "not run".
  const auto narrowed = plan_of(dir, yaml, {"sweep.zip.objective=[sft]", "sweep.zip.lr=[1e-4]"});
  CHECK(narrowed.findings.size() == 2);

  const auto file = (dir / "exp.yaml").string();
  auto fails = [&](const std::string& findings, std::initializer_list<std::string> needles) {
    require_error([&] { plan_of(dir, kSweep + "findings:\n" + findings); }, needles);
  };
  fails("  f: {higher: {stage: nope}, lower: {stage: eval_grpo}}\n",
        {file + ":", "findings.f.higher.stage", "no stage 'nope'"});
  fails("  f: {higher: {stage: eval_grpo}}\n", {"findings.f", "missing 'lower'"});
  fails("  f: {metric: pass, higher: {stage: eval_grpo}, lower: {stage: eval_grpo}}\n",
        {"findings.f.metric", "unknown metric 'pass'"});
  fails("  f: {higher: {stage: qat}, lower: {stage: eval_grpo}}\n",
        {"findings.f.higher.stage", "runs qat-sft, not eval-math"});
  fails("  f: {higher: {stage: eval_grpo, where: {colour: red}}, lower: {stage: eval_grpo}}\n",
        {"findings.f.higher.where.colour", "not a sweep variable"});
  fails("  f: {higher: {stage: eval_grpo}, lower: {stage: eval_grpo}, note: x}\n",
        {"findings.f.note", "unknown key"});
}

TEST_CASE("seeds: a sweep of training seeds that repeats only the stages that use ${seed}") {
  TempDir dir("exp-seeds");
  const std::string yaml = R"(name: seeds
seeds: 3
vars: {data_seed: 0}
sweep:
  grid:
    objective: [sft, kd]
stages:
  task:
    tool: rqat tiny-task
    args: {seed: "${data_seed}"}
  ptq:
    tool: ptq
    args: {model: "${run_dir}/teacher", method: rtn, bits: 2}
  eval_ptq:
    tool: eval-math
    inputs: {model: ptq}
  qat:
    tool: qat-${objective}
    inputs: {model: ptq}
    args: {seed: "${seed}"}
  eval_qat:
    tool: eval-math
    inputs: {model: qat}
findings:
  kd_beats_sft:
    higher: {stage: eval_qat, where: {objective: kd}}
    lower: {stage: eval_qat, where: {objective: sft}}
)";
  const auto plan = plan_of(dir, yaml);
  CHECK(plan.seed_variable == "seed");
  CHECK(plan.sweep_variables == std::vector<std::string>{"objective", "seed"});
  // The data, the PTQ model and its evaluation do not depend on the seed: one instance each.
  CHECK(ids_of(plan, "task") == std::vector<std::string>{"task"});
  CHECK(ids_of(plan, "ptq") == std::vector<std::string>{"ptq"});
  CHECK(ids_of(plan, "eval_ptq") == std::vector<std::string>{"eval_ptq"});
  const auto qat = ids_of(plan, "qat");
  CHECK(qat.size() == 6);
  CHECK(std::count(qat.begin(), qat.end(), "qat.objective-kd.seed-2") == 1);
  CHECK(ids_of(plan, "eval_qat").size() == 6);
  const auto* trained = plan.find("qat.objective-sft.seed-1");
  REQUIRE(trained != nullptr);
  const auto seed_flag = std::find(trained->argv.begin(), trained->argv.end(), "--seed");
  REQUIRE(seed_flag != trained->argv.end());
  CHECK(*std::next(seed_flag) == "1");
  CHECK(point_value(*trained, "seed") == "1");
  CHECK(point_value(*plan.find("ptq"), "seed").empty());
  // plan.json keeps the seed variable for the report.
  write_plan(dir / "plan.json", plan);
  CHECK(read_plan(dir / "plan.json").seed_variable == "seed");

  // --set seeds=N (a top-level key, not a variable) and explicit lists.
  CHECK(ids_of(plan_of(dir, yaml, {"seeds=1"}), "qat").size() == 2);
  const auto listed = plan_of(dir, yaml, {"seeds=[4, 9]"});
  CHECK(listed.find("qat.objective-kd.seed-9") != nullptr);
  CHECK(ids_of(listed, "qat").size() == 4);

  // Errors name the key.
  const auto file = (dir / "exp.yaml").string();
  require_error([&] { plan_of(dir, yaml, {"seeds=0"}); }, {"--set seeds", "at least 1 seed"});
  require_error([&] { plan_of(dir, yaml, {"seeds=[1, 1]"}); }, {"seeds", "listed twice"});
  require_error([&] { plan_of(dir, yaml, {"seeds=two"}); }, {"seeds", "non-negative integer"});
  require_error([&] { plan_of(dir, yaml, {"stages.qat.args.seed=5"}); },
                {"exp.yaml:2", "seeds", "no stage uses ${seed}"});
  // A `seed` in vars is the value of one run (no `seeds:`); the sweep wins over it.
  CHECK(plan_of(dir, yaml, {"vars.seed=0"}).find("qat.objective-kd.seed-2") != nullptr);
  const std::string one_run = std::string(yaml).replace(yaml.find("seeds: 3\n"), 9, "");
  const auto single = plan_of(dir, one_run, {"vars.seed=7"});
  CHECK(single.seed_variable.empty());
  CHECK(ids_of(single, "qat") == std::vector<std::string>{"qat.objective-sft", "qat.objective-kd"});
  require_error([&] { plan_of(dir, yaml, {"sweep.grid.seed=[0, 1]"}); },
                {"seeds", "already has a 'seed' axis"});
}
