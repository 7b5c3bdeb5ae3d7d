// Watching runs: OUT/progress.json (io/progress_file.h) — its fields, the ETA from the recent rate,
// the throttle, "failed" when a stage unwinds and the tool's error line — and `rqat status`'s
// reading of a run directory (experiment/run_status.h) in every state: finished, running,
// stopped, failed (by the runner's record and by the progress file alone, as under SLURM), lost,
// blocked and waiting.
#include "catch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "experiment/experiment_plan.h"
#include "experiment/run_status.h"
#include "io/json_file.h"
#include "io/progress_file.h"
#include "test_util.h"

using rqat::io::Json;
using rqat::io::ProgressFile;
using rqat::test::TempDir;
namespace ex = rqat::experiment;

namespace {

Json progress_of(const std::filesystem::path& dir) { return rqat::io::read_json_file(dir / "progress.json"); }

std::string host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// A pid that belonged to a process that has ended (and was reaped).
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("progress.json: counts, the recent rate and its ETA, metrics, and the end states") {
  TempDir dir("progress");
  {
    ProgressFile progress(dir.path(), "qat-kd", "steps", 100, 10, /*min_interval_seconds=*/0);
    auto json = progress_of(dir.path());
    CHECK(json["tool"] == "qat-kd");
    CHECK(json["state"] == "running");
    CHECK(json["done"] == 10);
    CHECK(json["total"] == 100);
    CHECK(json["eta_seconds"].is_null());  // no rate yet
    CHECK(json["pid"] == static_cast<int64_t>(getpid()));
    CHECK(json["host"] == host());

    for (int step = 11; step <= 14; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      progress.update(step, {{"loss", 1.0 / step}});
    }
    json = progress_of(dir.path());
    CHECK(json["done"] == 14);
    const double rate = json["rate"].get<double>();
    CHECK(rate > 5);    // 4 steps in ~80 ms: ~50/s, generous bounds for a loaded machine
    CHECK(rate < 250);
    CHECK(json["eta_seconds"].get<double>() == Approx((100 - 14) / rate).epsilon(1e-12));
    CHECK(json["metrics"]["loss"].get<double>() == Approx(1.0 / 14));
    progress.update(15, {{"eval_accuracy", 0.5}});
    json = progress_of(dir.path());
    CHECK(json["metrics"]["loss"].get<double>() == Approx(1.0 / 14));  // kept: merged, not replaced
    CHECK(json["metrics"]["eval_accuracy"] == 0.5);
    progress.finish("stopped");
    CHECK(progress_of(dir.path())["state"] == "stopped");
    CHECK(progress_of(dir.path())["eta_seconds"].is_null());
  }
  // A clean stop is not turned into a failure by a later error report.
  rqat::io::note_failure_in_progress("eval-math: error: unrelated");
  CHECK(progress_of(dir.path())["state"] == "stopped");
}

TEST_CASE("progress.json: updates are throttled, a stage that unwinds says failed with its error") {
  TempDir dir("progress-failed");
  try {
    ProgressFile progress(dir.path(), "grpo", "steps", 10, 0, /*min_interval_seconds=*/3600);
    progress.update(3);
    CHECK(progress_of(dir.path())["done"] == 0);  // within the interval: not written
    progress.update(5, {}, /*force=*/true);
    CHECK(progress_of(dir.path())["done"] == 5);
    progress.update(10);  // the last one is always written
    CHECK(progress_of(dir.path())["done"] == 10);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  CHECK(progress_of(dir.path())["state"] == "failed");
  rqat::io::note_failure_in_progress("grpo: error: boom");
  const auto json = progress_of(dir.path());
  CHECK(json["state"] == "failed");
  CHECK(json["error"] == "grpo: error: boom");
  CHECK(rqat::io::read_progress(dir / "nowhere").is_null());
}

TEST_CASE("rqat status names every state of a run directory") {
  TempDir dir("run-status");
  const auto run_dir = dir.path();
  ex::ExperimentPlan plan;
  plan.name = "states";
  plan.run_dir = run_dir;
  const auto stage = [&](const std::string& id, std::vector<std::string> inputs = {}) {
    ex::StageInstance s;
    s.id = s.stage = s.label = id;
    s.tool = s.program = "qat-kd";
    s.argv = {"--out", (run_dir / id).string()};
    s.out_dir = run_dir / id;
    s.inputs = std::move(inputs);
    plan.stages.push_back(s);
    std::filesystem::create_directories(s.out_dir);
  };
  for (const char* id : {"done", "training", "stopped", "crashed", "slurm_failed", "lost"}) stage(id);
  stage("waits", {"training"});
  stage("ready", {"done"});
  stage("blocked", {"crashed"});
  stage("slurm_done", {"done"});  // finished under SLURM: a manifest, no runner record
  ex::write_plan(run_dir / "plan.json", plan);
  std::filesystem::create_directories(run_dir / "logs");

  // finished: a manifest with the planned arguments, and its numbers.
  rqat::io::write_json_file(run_dir / "done" / "manifest.json",
                            {{"args", {"/bin/qat-kd", "--out", (run_dir / "done").string()}},
                             {"metrics", {{"final_loss", 0.25}, {"eval_accuracy", 0.625}}}});
  rqat::io::write_json_file(run_dir / "slurm_done" / "manifest.json",
                            {{"args", {"/bin/qat-kd", "--out", (run_dir / "slurm_done").string()}},
                             {"metrics", {{"final_loss", 0.5}}}});
  // running: a progress file of this (live) process.
  auto running = std::make_unique<ProgressFile>(run_dir / "training", "qat-kd", "steps", 400, 120, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  running->update(130, {{"loss", 0.4123}});
  // stopped by a signal.
  ProgressFile(run_dir / "stopped", "eval-math", "samples", 80, 40).finish("stopped");
  // failed under rqat run: the runner's record and the log's error line.
  rqat::io::write_json_file(run_dir / "logs" / "crashed.json", {{"status", "failed"}, {"exit_code", 1}});
  std::ofstream(run_dir / "logs" / "crashed.log") << "step 3/10 | loss 1.0\nqat-kd: error: NaN loss at step 4\n";
  // failed under SLURM: no record, the progress file carries the error.
  {
    ProgressFile failing(run_dir / "slurm_failed", "grpo", "steps", 10, 0, 0);
  }
  rqat::io::note_failure_in_progress("grpo: error: out of memory");
  // lost: says running, but its writer (on this host) has ended.
  {
    Json json = rqat::io::read_json_file(run_dir / "training" / "progress.json");
    json["pid"] = static_cast<int64_t>(dead_pid());
    rqat::io::write_json_file(run_dir / "lost" / "progress.json", json);
  }

  const auto status = ex::collect_run_status(run_dir);
  std::map<std::string, ex::StageStatus> by_id;
  for (const auto& s : status.stages) by_id[s.id] = s;
  CHECK(by_id["done"].state == "finished");
  CHECK(by_id["done"].latest == "loss 0.2500  eval acc 62.5%");
  CHECK(by_id["training"].state == "running");
  CHECK(*by_id["training"].done == 130);
  CHECK(*by_id["training"].total == 400);
  REQUIRE(by_id["training"].eta_seconds.has_value());
  CHECK(*by_id["training"].eta_seconds > 0);
  CHECK(by_id["training"].latest == "loss 0.4123");
  CHECK(by_id["stopped"].state == "stopped");
  CHECK(by_id["crashed"].state == "failed");
  CHECK(by_id["crashed"].detail == "exit 1: qat-kd: error: NaN loss at step 4");
  CHECK(by_id["crashed"].log == run_dir / "logs" / "crashed.log");
  CHECK(by_id["slurm_failed"].state == "failed");
  CHECK(by_id["slurm_failed"].detail == "grpo: error: out of memory");
  CHECK(by_id["lost"].state == "lost");
  CHECK(by_id["waits"].state == "waiting");
  CHECK(by_id["waits"].detail == "on training");
  CHECK(by_id["ready"].detail == "ready");
  CHECK(by_id["blocked"].state == "blocked");
  CHECK(by_id["blocked"].detail == "input crashed did not finish");
  CHECK(by_id["slurm_done"].state == "finished");
  CHECK_FALSE(status.settled());

  const std::string table = ex::format_run_status(status);
  CHECK_THAT(table, Catch::Contains("10 stage instances: 2 finished, 1 running, 1 stopped, 2 failed, "
                                    "1 lost, 1 blocked, 2 waiting"));
  CHECK_THAT(table, Catch::Contains("step 130/400 32.5%"));
  CHECK_THAT(table, Catch::Contains("40/80 samples 50.0%"));
  CHECK_THAT(table, Catch::Contains("(log " + (run_dir / "logs" / "crashed.log").string() + ")"));

  running.reset();  // unwinding without finish(): the stage says failed now
  CHECK(rqat::io::read_json_file(run_dir / "training" / "progress.json")["state"] == "failed");

  // --watch stops when nothing runs or waits.
  ex::RunStatus settled;
  const auto stage_in = [](const char* state) {
    ex::StageStatus stage;
    stage.state = state;
    return stage;
  };
  for (const char* state : {"finished", "failed", "stopped", "lost", "blocked"})
    settled.stages.push_back(stage_in(state));
  CHECK(settled.settled());
  settled.stages.push_back(stage_in("waiting"));
  CHECK_FALSE(settled.settled());
  rqat::test::require_error([&] { ex::collect_run_status(run_dir / "nowhere"); },
                            {"nowhere", "not a directory"});
}
