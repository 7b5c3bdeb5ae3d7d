// `rqat run`'s executor with stand-in tools (small Python scripts that record how they were called
// and write a manifest like the real tools): every stage runs once, a rerun skips finished stages,
// a failure stops only its dependants, a rerun after a failure runs only what is left, training
// stages restart with --resume, and arguments reach the tool verbatim (no shell).
#include "catch.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "experiment/experiment_loader.h"
#include "experiment/stage_runner.h"
#include "io/json_file.h"
#include "test_util.h"

using namespace rqat::experiment;
using rqat::test::TempDir;

namespace {

// Lists its flags for --help; appends its argv (JSON) to $FAKE_CALLS; fails when $FAKE_FAIL occurs
// in its --out; a qat-kd whose
// --out contains $FAKE_CRASH leaves a checkpoint and exits 143 as if preempted.
const char* kFakeTool = R"(#!/usr/bin/env python3
import json, os, sys
argv = sys.argv
if "--help" in argv:
    print("Options:\n  --out TEXT\n  --bits INT\n  --note TEXT\n  --model TEXT\n  --resume")
    sys.exit(0)
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(argv) + "\n")
out = argv[argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
print("working on", out)
fail = os.environ.get("FAKE_FAIL")
if fail and fail in out:
    print("boom: simulated failure", file=sys.stderr)
    sys.exit(3)
crash = os.environ.get("FAKE_CRASH")
if crash and crash in out and "--resume" not in argv:
    os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
    open(os.path.join(out, "checkpoints", "latest"), "w").write("step-00000002\n")
    sys.exit(143)
json.dump({"tool": os.path.basename(argv[0]), "args": argv}, open(os.path.join(out, "manifest.json"), "w"))
)";

struct Fixture {
  TempDir dir{"stage-runner"};
  std::filesystem::path bin = dir / "bin";
  std::filesystem::path calls = dir / "calls.jsonl";

  Fixture() {
    std::filesystem::create_directories(bin);
    for (const char* tool : {"ptq", "qat-kd", "qat-sft", "eval-math"}) {
      rqat::test::write_bytes(bin / tool, kFakeTool);
      chmod((bin / tool).c_str(), 0755);
    }
    setenv("FAKE_CALLS", calls.c_str(), 1);
    unsetenv("FAKE_FAIL");
    unsetenv("FAKE_CRASH");
    rqat::test::write_bytes(dir / "exp.yaml", R"(name: fake
vars: {note: "plain"}
sweep:
  grid: {bits: [2, 3]}
  zip: {objective: [sft, kd]}
stages:
  ptq: {tool: ptq, args: {bits: "${bits}", note: "${note}"}}
  qat: {tool: "qat-${objective}", inputs: {model: ptq}}
  eval: {tool: eval-math, inputs: {model: qat}}
)");
  }

  ExperimentPlan plan(std::vector<std::string> overrides = {}) const {
    return load_experiment_plan({dir / "exp.yaml", std::move(overrides), dir / "run"});
  }

  int run(const ExperimentPlan& p, std::string* output = nullptr, RunOptions options = {}) const {
    options.bin_dir = bin;
    std::ostringstream out;
    const int code = run_plan(p, options, out);
    if (output) *output = out.str();
    return code;
  }

  std::vector<std::vector<std::string>> recorded() const {
    std::vector<std::vector<std::string>> lines;
    std::ifstream in(calls);
    std::string line;
    while (std::getline(in, line))
      lines.push_back(rqat::io::Json::parse(line).get<std::vector<std::string>>());
    return lines;
  }
  void forget_calls() const { std::filesystem::remove(calls); }
};

std::string status_of(const ExperimentPlan& plan, const std::string& id) {
  return rqat::io::read_json_file(stage_record_file(plan, *plan.find(id))).value("status", "");
}

}  // namespace

TEST_CASE("every instance runs once; a rerun skips them all") {
  Fixture f;
  const auto plan = f.plan();
  REQUIRE(plan.stages.size() == 2 + 4 + 4);
  std::string output;
  CHECK(f.run(plan, &output) == 0);
  CHECK(f.recorded().size() == plan.stages.size());
  CHECK(output.find("10 ran, 0 skipped, 0 failed") != std::string::npos);
  CHECK(std::filesystem::exists(f.dir / "run" / "plan.json"));
  CHECK(std::filesystem::exists(f.dir / "run" / "logs" / "ptq.bits-2.log"));
  for (const auto& s : plan.stages) CHECK(stage_is_finished(plan, s));

  f.forget_calls();
  CHECK(f.run(f.plan(), &output) == 0);
  CHECK(f.recorded().empty());
  CHECK(output.find("0 ran, 10 skipped") != std::string::npos);

  // A stage whose output was deleted runs again, even without a manifest to compare (the record
  // alone is not trusted once the output is gone).
  std::filesystem::remove_all(f.dir / "run" / "eval.bits-2.objective-kd");
  CHECK_FALSE(stage_is_finished(plan, *plan.find("eval.bits-2.objective-kd")));
  CHECK(f.run(f.plan(), &output) == 0);
  CHECK(f.recorded().size() == 1);
  f.forget_calls();

  // A changed value reruns exactly the stages it reaches: ptq at both bits, and everything after.
  f.forget_calls();
  CHECK(f.run(f.plan({"note=changed"})) == 0);
  CHECK(f.recorded().size() == 10);
  // --only runs a stage and its inputs; --dry-run runs nothing.
  f.forget_calls();
  RunOptions only;
  only.only = {"qat"};
  only.force = {"qat"};
  CHECK(f.run(f.plan({"note=changed"}), &output, only) == 0);
  CHECK(f.recorded().size() == 4);
  f.forget_calls();
  RunOptions dry;
  dry.dry_run = true;
  CHECK(f.run(f.plan({"note=other"}), &output, dry) == 0);
  CHECK(f.recorded().empty());
  CHECK(output.find("ptq --bits 2 --note other --out") != std::string::npos);
}

TEST_CASE("a failed stage stops its dependants, keeps the rest, and a rerun finishes the job") {
  Fixture f;
  const auto plan = f.plan();
  setenv("FAKE_FAIL", "ptq.bits-3", 1);
  std::string output;
  CHECK(f.run(plan, &output) == 1);
  CHECK(output.find("ptq.bits-3: FAILED (exit 3)") != std::string::npos);
  CHECK(output.find("boom: simulated failure") != std::string::npos);  // the log's tail
  CHECK(output.find((f.dir / "run" / "logs" / "ptq.bits-3.log").string()) != std::string::npos);
  CHECK(status_of(plan, "ptq.bits-3") == "failed");
  CHECK(status_of(plan, "qat.bits-3.objective-kd") == "blocked");
  CHECK(status_of(plan, "eval.bits-3.objective-sft") == "blocked");
  CHECK(status_of(plan, "eval.bits-2.objective-kd") == "done");
  CHECK(f.recorded().size() == 1 + 1 + 2 + 2);  // both ptq, bits-2's qat and eval

  unsetenv("FAKE_FAIL");
  f.forget_calls();
  CHECK(f.run(plan, &output) == 0);
  CHECK(f.recorded().size() == 1 + 2 + 2);  // only what was missing
  CHECK(output.find("5 ran, 5 skipped, 0 failed") != std::string::npos);
}

TEST_CASE("a preempted training stage restarts with --resume") {
  Fixture f;
  const auto plan = f.plan();
  setenv("FAKE_CRASH", "qat.bits-2.objective-kd", 1);
  CHECK(f.run(plan) == 1);
  f.forget_calls();
  CHECK(f.run(plan) == 0);
  const auto calls = f.recorded();
  REQUIRE(calls.size() == 2);  // the qat stage and its eval
  CHECK(calls[0].back() == "--resume");
  CHECK(calls[0][0].find("qat-kd") != std::string::npos);
  // The manifest records --resume; the stage still counts as finished with the planned arguments.
  CHECK(stage_is_finished(plan, *plan.find("qat.bits-2.objective-kd")));
}

TEST_CASE("a changed training stage starts over instead of resuming another configuration") {
  Fixture f;
  setenv("FAKE_CRASH", "qat.bits-2.objective-kd", 1);
  CHECK(f.run(f.plan()) == 1);
  const auto checkpoint = f.dir / "run" / "qat.bits-2.objective-kd" / "checkpoints" / "latest";
  REQUIRE(std::filesystem::exists(checkpoint));
  // Whatever else the earlier attempt left (an export that refuses to write over another) goes too.
  const auto stale =
      f.dir / "run" / "qat.bits-2.objective-kd" / "compressed-tensors" / "config.json";
  std::filesystem::create_directories(stale.parent_path());
  std::ofstream(stale) << "{}";
  unsetenv("FAKE_CRASH");
  f.forget_calls();
  // Another value for the stage's input (ptq reruns), so the checkpoint is of other inputs.
  CHECK(f.run(f.plan({"note=changed"})) == 0);
  for (const auto& call : f.recorded()) CHECK(call.back() != "--resume");
  CHECK_FALSE(std::filesystem::exists(checkpoint));
  CHECK_FALSE(std::filesystem::exists(stale));
}

TEST_CASE("values reach the tool verbatim: nothing in a YAML file runs as a command") {
  Fixture f;
  const std::string hostile = "$(touch " + (f.dir / "pwned").string() + "); `id` 'q' \"d\" ;|&";
  const auto plan = f.plan({"note=" + hostile, "sweep.grid.bits=[2]", "sweep.zip.objective=[kd]"});
  CHECK(f.run(plan) == 0);
  CHECK_FALSE(std::filesystem::exists(f.dir / "pwned"));
  const auto calls = f.recorded();
  REQUIRE(!calls.empty());
  const auto& ptq = calls.front();
  CHECK(std::find(ptq.begin(), ptq.end(), hostile) != ptq.end());
}

TEST_CASE("missing input paths, unknown flags and missing tools stop the run before it starts") {
  Fixture f;
  rqat::test::require_error(
      [&] { f.run(f.plan({"stages.ptq.args.model=/nonexistent/model"})); },
      {"--set stages.ptq.args.model", "/nonexistent/model does not exist", "ptq.bits-2"});
  rqat::test::require_error([&] { f.run(f.plan({"stages.ptq.args.bitz=3"})); },
                            {"exp.yaml:7:3", "stage ptq.bits-2", "ptq has no flag --bitz"});
  std::filesystem::remove(f.bin / "eval-math");
  rqat::test::require_error([&] { f.run(f.plan()); }, {"--bin-dir", "eval-math"});
  CHECK(f.recorded().empty());
}
