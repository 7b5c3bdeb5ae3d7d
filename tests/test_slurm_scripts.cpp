// `rqat sbatch`: SLURM scripts from hand-built experiment plans. Checks the #SBATCH lines, job
// arrays and their case arms, srun only for multi-GPU/multi-node stages, submit.sh's order and
// --dependency flags, and submission through a fake `sbatch` put first on PATH that records its
// calls. The generated scripts are also run with bash (fake tool binaries that print their argv,
// a fake srun) to show that the right instance runs and that hostile values arrive verbatim and
// run nothing: quoting is judged by the shell itself, not by comparing strings.
#include "catch.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment_loader.h"
#include "experiment/slurm_scripts.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace rqat::experiment;
using rqat::test::read_bytes;
using rqat::test::require_error;
using rqat::test::TempDir;
using rqat::test::write_bytes;

StageInstance instance(const fs::path& run_dir, const std::string& id, const std::string& stage,
                       const std::string& program, std::vector<std::string> argv,
                       std::vector<std::string> inputs = {}, SlurmResources resources = {}) {
  StageInstance s;
  s.id = id;
  s.stage = stage;
  s.tool = program;
  s.program = program;
  s.out_dir = run_dir / id;
  argv.push_back("--out");
  argv.push_back(s.out_dir.string());
  s.argv = std::move(argv);
  s.inputs = std::move(inputs);
  s.label = id;
  s.resources = resources;
  s.location = {"experiments/exp.yaml", 12, 3};
  return s;
}

SlurmResources one_gpu() {
  SlurmResources r;
  r.gpus = 1;
  r.cpus = 4;
  r.time = "04:00:00";
  r.mem = "64G";
  r.partition = "gpu";
  r.account = "proj-123";
  return r;
}

ExperimentPlan base_plan(const fs::path& run_dir) {
  ExperimentPlan plan;
  plan.name = "kd-sweep";
  plan.experiment_file = "experiments/exp.yaml";
  plan.run_dir = run_dir;
  return plan;
}

SlurmOptions options_in(const TempDir& dir) { return {dir / "slurm", dir / "bin", dir.path()}; }

// The parts of text between separators; a last part without a separator after it counts too.
std::vector<std::string> split_at(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text) {
    if (c == separator) {
      parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) parts.push_back(part);
  return parts;
}

std::vector<std::string> lines_of(const std::string& text) { return split_at(text, '\n'); }

std::vector<std::string> sbatch_lines(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(text))
    if (line.rfind("#SBATCH ", 0) == 0) out.push_back(line.substr(8));
  return out;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Hostile values: each would create its canary file if the shell ever evaluated it.
std::vector<std::string> hostile_values(const TempDir& dir) {
  const std::string canary = (dir / "CANARY").string();
  return {"$(touch " + canary + ")",
          "`touch " + canary + "`",
          "it's; touch " + canary + " #",
          "line one\ntouch " + canary + "\n",
          "\"double\" 'single' \\ $HOME ${PATH} * ?",
          "",
          "'"};
}

// A 2 x 2 sweep: ptq at bits 3 and 2 (shared by both objectives), qat at every point (qat-sft or
// qat-kd, hostile values in its arguments), and one eval that needs a ptq and a qat instance.
ExperimentPlan sweep_plan(const TempDir& dir) {
  const fs::path run = dir / "run";
  ExperimentPlan plan = base_plan(run);
  plan.sweep_variables = {"bits", "objective"};
  plan.slurm_setup = {"export RQAT_FROM_SETUP=\"setup ran\"",
                      "test -z \"${RQAT_SURELY_UNSET_VARIABLE}\""};
  const auto hostile = hostile_values(dir);
  for (const std::string bits : {"3", "2"}) {
    plan.stages.push_back(
        instance(run, "ptq.bits-" + bits, "ptq", "ptq",
                 {"--model", "models/tiny", "--bits", bits, "--group-size", "128"}, {}, one_gpu()));
  }
  for (const std::string bits : {"3", "2"}) {
    for (const std::string objective : {"sft", "kd"}) {
      std::vector<std::string> argv = {"--model", (run / ("ptq.bits-" + bits)).string(),
                                       "--lr",    hostile[0],
                                       "--note",  hostile[1],
                                       "--tag"};
      argv.insert(argv.end(), hostile.begin() + 2, hostile.end());
      auto s = instance(run, "qat.bits-" + bits + ".objective-" + objective, "qat",
                        "qat-" + objective, argv, {"ptq.bits-" + bits}, one_gpu());
      s.point = {{"bits", bits}, {"objective", objective}};
      plan.stages.push_back(s);
    }
  }
  plan.stages.push_back(instance(run, "eval", "eval", "eval-math",
                                 {"--model", (run / "qat.bits-3.objective-kd").string()},
                                 {"qat.bits-3.objective-kd", "ptq.bits-3"}, one_gpu()));
  return plan;
}

// Puts `dir` first on PATH for the lifetime of the object.
class PathPrefix {
 public:
  explicit PathPrefix(const fs::path& dir) {
    const char* old = std::getenv("PATH");
    if (old) old_ = old;
    ::setenv("PATH", (dir.string() + (old ? ":" + *old_ : "")).c_str(), 1);
  }
  ~PathPrefix() {
    if (old_) {
      ::setenv("PATH", old_->c_str(), 1);
    } else {
      ::unsetenv("PATH");
    }
  }

 private:
  std::optional<std::string> old_;
};

void write_script(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  write_bytes(file, text);
  fs::permissions(file, fs::perms::owner_all, fs::perm_options::replace);
}

// A fake sbatch: appends its arguments (one call per line) to calls.txt beside it and prints
// increasing job ids 1001, 1002, ... in --parsable's "ID;CLUSTER" form. FAIL_AT=N makes call N
// fail like a rejected submission.
fs::path write_fake_sbatch(const fs::path& dir) {
  write_script(dir / "sbatch",
               "#!/bin/sh\n"
               "here=$(dirname \"$0\")\n"
               "n=$(cat \"$here/counter\" 2>/dev/null || echo 1000)\n"
               "n=$((n + 1))\n"
               "echo \"$n\" > \"$here/counter\"\n"
               "if [ \"${FAIL_AT:-}\" = \"$n\" ]; then\n"
               "  echo 'sbatch: error: Invalid partition name specified' >&2\n"
               "  exit 1\n"
               "fi\n"
               "printf '%s\\n' \"$*\" >> \"$here/calls.txt\"\n"
               "echo \"$n;fakecluster\"\n");
  return dir / "calls.txt";
}

// Fake tool binaries: print their path, every argument and RQAT_FROM_SETUP, NUL-terminated.
void write_fake_tools(const fs::path& bin_dir, const std::vector<std::string>& programs) {
  for (const auto& program : programs) {
    write_script(bin_dir / program,
                 "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" \"setup: ${RQAT_FROM_SETUP:-}\"\n");
  }
}

std::vector<std::string> split_nul(const std::string& bytes) {
  REQUIRE((bytes.empty() || bytes.back() == '\0'));  // every part is NUL-terminated
  return split_at(bytes, '\0');
}

// Runs `bash SCRIPT` from `dir` with extra environment assignments; returns the exit status.
int run_bash(const TempDir& dir, const fs::path& script, const std::string& env,
             const fs::path& out, const fs::path& err) {
  const std::string command = "cd " + shell_quote(dir.path().string()) + " && env " + env +
                              " bash " + shell_quote(script.string()) + " > " +
                              shell_quote(out.string()) + " 2> " + shell_quote(err.string());
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("shell_quote writes one single-quoted word the shell reads back verbatim") {
  CHECK(shell_quote("plain") == "'plain'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("$(rm -rf /)") == "'$(rm -rf /)'");
  CHECK(shell_quote("`x`\n'") == "'`x`\n'\\'''");

  TempDir dir("shell_quote");
  const auto values = hostile_values(dir);
  for (const auto& value : values) {
    INFO("value: " << value);
    // sh reads the quoted word and printf writes it back unchanged, NUL-terminated.
    const fs::path out = dir / "out";
    const std::string command =
        "printf '%s\\0' " + shell_quote(value) + " > " + shell_quote(out.string());
    REQUIRE(std::system(command.c_str()) == 0);
    CHECK(read_bytes(out) == value + '\0');
  }
  CHECK_FALSE(fs::exists(dir / "CANARY"));
}

TEST_CASE("a single-instance stage: #SBATCH lines from its resources, the tool run directly") {
  TempDir dir("slurm_single");
  const fs::path run = dir / "run";
  ExperimentPlan plan = base_plan(run);
  plan.slurm_setup = {"module load cuda/12.4", "source ~/venv/bin/activate"};
  SlurmResources r = one_gpu();
  r.constraint = "a100&(ib|eth)";
  r.qos = "high";
  plan.stages.push_back(
      instance(run, "ptq", "ptq", "ptq", {"--model", "models/m", "--bits", "3"}, {}, r));
  const auto scripts = write_slurm_scripts(plan, options_in(dir));

  REQUIRE(scripts.size() == 1);
  CHECK(scripts[0].stage == "ptq");
  CHECK(scripts[0].file == dir / "slurm" / "ptq.sbatch");
  CHECK(scripts[0].instance_ids == std::vector<std::string>{"ptq"});
  CHECK(scripts[0].after.empty());
  CHECK(scripts[0].log_dir == run / "logs");
  // The run directory holds the plan, for `rqat status` and `rqat report`.
  CHECK(read_plan(run / "plan.json").stages.at(0).id == "ptq");
  const std::string text = read_bytes(scripts[0].file);
  INFO(text);
  CHECK(text.rfind("#!/bin/bash\n", 0) == 0);
  CHECK(sbatch_lines(text) == std::vector<std::string>{
                                  "--job-name=kd-sweep-ptq",
                                  "--output=" + (run / "logs" / "ptq-%j.out").string(),
                                  "--nodes=1",
                                  "--gpus-per-node=1",
                                  "--cpus-per-task=4",
                                  "--time=04:00:00",
                                  "--mem=64G",
                                  "--partition=gpu",
                                  "--account=proj-123",
                                  "--constraint=a100&(ib|eth)",
                                  "--qos=high",
                              });
  // sbatch stops reading directives at the first command: every #SBATCH line comes before it.
  const auto lines = lines_of(text);
  size_t last_directive = 0, first_command = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("#SBATCH", 0) == 0) last_directive = i;
    if (!lines[i].empty() && lines[i][0] != '#' && first_command == lines.size()) first_command = i;
  }
  CHECK(last_directive < first_command);
  CHECK(lines[first_command] == "set -euo pipefail");
  CHECK(contains(text, "set +u\nmodule load cuda/12.4\nsource ~/venv/bin/activate\nset -u\n"));
  CHECK(contains(text, "cd " + shell_quote(dir.path().string()) + "\n"));
  CHECK(contains(text, "mkdir -p " + shell_quote((run / "ptq").string()) + "\n"));
  CHECK(contains(text, "exec " + shell_quote((dir / "bin" / "ptq").string()) +
                           " \\\n    '--model' 'models/m' \\\n    '--bits' '3' \\\n    '--out' " +
                           shell_quote((run / "ptq").string()) + "\n"));
  CHECK_FALSE(contains(text, "srun"));
  CHECK_FALSE(contains(text, "--array"));
  CHECK_FALSE(contains(text, "SLURM_ARRAY_TASK_ID"));

  const std::string submit = read_bytes(dir / "slurm" / "submit.sh");
  CHECK(contains(submit, "jid_ptq=$(sbatch --parsable " +
                             shell_quote((dir / "slurm" / "ptq.sbatch").string()) + ")\n"));
  CHECK_FALSE(contains(submit, "--dependency"));
  CHECK((fs::status(dir / "slurm" / "submit.sh").permissions() & fs::perms::owner_exec) !=
        fs::perms::none);
  CHECK(contains(read_bytes(dir / "slurm" / "plan.txt"), "ptq (ptq.sbatch), after: -\n  0  ptq\n"));
}

TEST_CASE("a 2x2 sweep: job arrays per stage, case arms per instance, stage-level afterok") {
  TempDir dir("slurm_sweep");
  const ExperimentPlan plan = sweep_plan(dir);
  const fs::path run = plan.run_dir;
  const auto scripts = write_slurm_scripts(plan, options_in(dir));

  REQUIRE(scripts.size() == 3);
  CHECK(scripts[0].stage == "ptq");
  CHECK(scripts[0].instance_ids == std::vector<std::string>{"ptq.bits-3", "ptq.bits-2"});
  CHECK(scripts[0].after.empty());
  CHECK(scripts[1].stage == "qat");
  CHECK(scripts[1].instance_ids ==
        std::vector<std::string>{"qat.bits-3.objective-sft", "qat.bits-3.objective-kd",
                                 "qat.bits-2.objective-sft", "qat.bits-2.objective-kd"});
  CHECK(scripts[1].after == std::vector<std::string>{"ptq"});
  CHECK(scripts[2].stage == "eval");
  CHECK(scripts[2].after == std::vector<std::string>{"qat", "ptq"});

  const std::string ptq = read_bytes(scripts[0].file);
  CHECK(contains(ptq, "#SBATCH --array=0-1\n"));
  CHECK(contains(ptq, "#SBATCH --output=" + (run / "logs" / "ptq-%A_%a.out").string() + "\n"));
  const std::string qat = read_bytes(scripts[1].file);
  INFO(qat);
  CHECK(contains(qat, "#SBATCH --array=0-3\n"));
  CHECK(contains(qat, "#SBATCH --job-name=kd-sweep-qat\n"));
  CHECK(contains(qat, "case \"${SLURM_ARRAY_TASK_ID:-}\" in\n"));
  // Arm i runs instance i, with its own program.
  for (size_t i = 0; i < 4; ++i) {
    const auto& s = *plan.find(scripts[1].instance_ids[i]);
    const size_t arm = qat.find("\n  " + std::to_string(i) + ")\n");
    REQUIRE(arm != std::string::npos);
    const size_t end = qat.find(";;", arm);
    const std::string body = qat.substr(arm, end - arm);
    CHECK(contains(body, "exec " + shell_quote((dir / "bin" / s.program).string()) + " \\\n"));
    CHECK(contains(body, shell_quote(s.out_dir.string())));
    CHECK(contains(body, shell_quote("rqat sbatch: instance " + s.id)));
  }
  CHECK_FALSE(contains(qat, "srun"));
  CHECK(sbatch_lines(read_bytes(scripts[2].file)).size() == 9);  // no --array for one instance

  // submit.sh: stages in order, each after the union of its inputs' stages.
  const std::string submit = read_bytes(dir / "slurm" / "submit.sh");
  const size_t p = submit.find("jid_ptq=$(sbatch");
  const size_t q = submit.find("jid_qat=$(sbatch");
  const size_t e = submit.find("jid_eval=$(sbatch");
  REQUIRE(p != std::string::npos);
  REQUIRE(q != std::string::npos);
  REQUIRE(e != std::string::npos);
  CHECK((p < q && q < e));
  CHECK(contains(submit,
                 "jid_qat=$(sbatch --parsable --kill-on-invalid-dep=yes "
                 "--dependency=\"afterok:$jid_ptq\" "));
  CHECK(contains(submit,
                 "jid_eval=$(sbatch --parsable --kill-on-invalid-dep=yes "
                 "--dependency=\"afterok:$jid_qat:$jid_ptq\" "));

  // Running submit.sh with the fake sbatch records the calls with the fake ids substituted.
  const fs::path fake_dir = dir / "fake";
  const fs::path calls = write_fake_sbatch(fake_dir);
  {
    PathPrefix path(fake_dir);
    REQUIRE(run_bash(dir, dir / "slurm" / "submit.sh", "", dir / "submit.out",
                     dir / "submit.err") == 0);
  }
  const std::string slurm = (dir / "slurm").string();
  CHECK(
      lines_of(read_bytes(calls)) ==
      std::vector<std::string>{
          "--parsable " + slurm + "/ptq.sbatch",
          "--parsable --kill-on-invalid-dep=yes --dependency=afterok:1001 " + slurm + "/qat.sbatch",
          "--parsable --kill-on-invalid-dep=yes --dependency=afterok:1002:1001 " + slurm +
              "/eval.sbatch"});
  CHECK(read_bytes(dir / "submit.out") == "ptq: job 1001\nqat: job 1002\neval: job 1003\n");
  CHECK(fs::is_directory(run / "logs"));  // sbatch fails a job whose log directory is missing
}

TEST_CASE("array task 2 runs the third instance with its arguments intact") {
  TempDir dir("slurm_run_array");
  const ExperimentPlan plan = sweep_plan(dir);
  const auto scripts = write_slurm_scripts(plan, options_in(dir));
  write_fake_tools(dir / "bin", {"ptq", "qat-sft", "qat-kd", "eval-math"});

  const StageInstance& third = *plan.find("qat.bits-2.objective-sft");
  REQUIRE(scripts[1].instance_ids[2] == third.id);
  REQUIRE(run_bash(dir, scripts[1].file, "SLURM_ARRAY_TASK_ID=2", dir / "out", dir / "err") == 0);
  std::vector<std::string> expected = {(dir / "bin" / "qat-sft").string()};
  expected.insert(expected.end(), third.argv.begin(), third.argv.end());
  expected.push_back("setup: setup ran");
  CHECK(split_nul(read_bytes(dir / "out")) == expected);
  CHECK(read_bytes(dir / "err") == "rqat sbatch: instance " + third.id + "\n");
  CHECK(fs::is_directory(third.out_dir));
  CHECK_FALSE(fs::exists(plan.find("qat.bits-2.objective-kd")->out_dir));
  CHECK_FALSE(fs::exists(dir / "CANARY"));

  // The single-instance eval script needs no task id.
  REQUIRE(run_bash(dir, scripts[2].file, "", dir / "out", dir / "err") == 0);
  CHECK(split_nul(read_bytes(dir / "out")).at(0) == (dir / "bin" / "eval-math").string());

  // A task id outside the array stops before running anything.
  CHECK(run_bash(dir, scripts[1].file, "SLURM_ARRAY_TASK_ID=4", dir / "out", dir / "err") == 2);
  CHECK(read_bytes(dir / "out").empty());
  CHECK(contains(read_bytes(dir / "err"), "SLURM_ARRAY_TASK_ID='4' is not one of 0-3"));
}

TEST_CASE("multi-GPU and multi-node stages run one task per GPU with srun") {
  TempDir dir("slurm_srun");
  const fs::path run = dir / "run";
  struct Case {
    int nodes, gpus;
    bool srun;
    int tasks_per_node;
  };
  for (const Case c : {Case{1, 0, false, 0}, Case{1, 1, false, 0}, Case{1, 2, true, 2},
                       Case{2, 4, true, 4}, Case{2, 0, true, 1}, Case{3, 1, true, 1}}) {
    INFO("nodes " << c.nodes << " gpus " << c.gpus);
    ExperimentPlan plan = base_plan(run);
    SlurmResources r;
    r.nodes = c.nodes;
    r.gpus = c.gpus;
    r.cpus = 8;
    plan.stages.push_back(instance(run, "kd", "kd", "qat-kd", {"--model", "m"}, {}, r));
    const auto scripts = write_slurm_scripts(plan, options_in(dir));
    const std::string text = read_bytes(scripts[0].file);
    INFO(text);
    const auto directives = sbatch_lines(text);
    auto has = [&](const std::string& d) {
      return std::find(directives.begin(), directives.end(), d) != directives.end();
    };
    CHECK(has("--nodes=" + std::to_string(c.nodes)));
    CHECK(has("--gpus-per-node=" + std::to_string(c.gpus)) == (c.gpus > 0));
    CHECK(has("--ntasks-per-node=" + std::to_string(c.tasks_per_node)) == c.srun);
    CHECK(contains(text, "--ntasks-per-node") == c.srun);
    const std::string binary = shell_quote((dir / "bin" / "qat-kd").string());
    CHECK(contains(text, "exec srun --kill-on-bad-exit=1 --cpus-per-task=8 " + binary) == c.srun);
    CHECK(contains(text, "exec " + binary) == !c.srun);
  }

  // Run the 2-node script with a fake srun that records its options and starts the tool.
  ExperimentPlan plan = base_plan(run);
  SlurmResources r;
  r.nodes = 2;
  r.gpus = 4;
  plan.stages.push_back(instance(run, "kd", "kd", "qat-kd", {"--note", "$(x) 'y' \"z\"\n"}, {}, r));
  const auto scripts = write_slurm_scripts(plan, options_in(dir));
  write_fake_tools(dir / "bin", {"qat-kd"});
  write_script(dir / "fake" / "srun",
               "#!/bin/sh\n"
               "printf '%s\\n' \"$*\" > \"$(dirname \"$0\")/srun_options\"\n"
               "while [ $# -gt 0 ] && [ \"${1#--}\" != \"$1\" ]; do shift; done\n"
               "exec \"$@\"\n");
  {
    PathPrefix path(dir / "fake");
    REQUIRE(run_bash(dir, scripts[0].file, "", dir / "out", dir / "err") == 0);
  }
  CHECK(split_nul(read_bytes(dir / "out")) ==
        std::vector<std::string>{(dir / "bin" / "qat-kd").string(), "--note", "$(x) 'y' \"z\"\n",
                                 "--out", (run / "kd").string(), "setup: "});
  CHECK(lines_of(read_bytes(dir / "fake" / "srun_options")).at(0) ==
        "--kill-on-bad-exit=1 " + (dir / "bin" / "qat-kd").string() + " --note $(x) 'y' \"z\"");
}

TEST_CASE("submission order follows stage dependencies, not first appearance") {
  TempDir dir("slurm_order");
  const fs::path run = dir / "run";
  ExperimentPlan plan = base_plan(run);
  // x's first instance comes before y, but x's second instance needs y.
  plan.stages.push_back(instance(run, "x.a-1", "x", "ptq", {}));
  plan.stages.push_back(instance(run, "y", "y", "ptq", {}));
  plan.stages.push_back(instance(run, "x.a-2", "x", "ptq", {}, {"y"}));
  const auto scripts = write_slurm_scripts(plan, options_in(dir));
  REQUIRE(scripts.size() == 2);
  CHECK(scripts[0].stage == "y");
  CHECK(scripts[1].stage == "x");
  CHECK(scripts[1].after == std::vector<std::string>{"y"});

  // y needing the other x instance makes the stages wait for each other.
  plan.stages[1].inputs = {"x.a-1"};
  require_error([&] { write_slurm_scripts(plan, options_in(dir)); },
                {"experiments/exp.yaml:12:3", "stages 'x', 'y'", "per stage"});
}

TEST_CASE("submit_slurm_scripts calls sbatch in order with afterok on the returned ids") {
  TempDir dir("slurm_submit");
  const auto scripts = write_slurm_scripts(sweep_plan(dir), options_in(dir));
  const fs::path fake_dir = dir / "fake";
  const fs::path calls = write_fake_sbatch(fake_dir);
  PathPrefix path(fake_dir);

  fs::remove_all(dir / "run");
  const auto ids = submit_slurm_scripts(scripts);
  CHECK(ids == std::vector<std::string>{"1001", "1002", "1003"});
  CHECK(fs::is_directory(dir / "run" / "logs"));
  const std::string slurm = (dir / "slurm").string();
  CHECK(
      lines_of(read_bytes(calls)) ==
      std::vector<std::string>{
          "--parsable " + slurm + "/ptq.sbatch",
          "--parsable --kill-on-invalid-dep=yes --dependency=afterok:1001 " + slurm + "/qat.sbatch",
          "--parsable --kill-on-invalid-dep=yes --dependency=afterok:1002:1001 " + slurm +
              "/eval.sbatch"});

  // A rejected submission names the script, sbatch's message and what was already submitted.
  fs::remove(calls);
  fs::remove(fake_dir / "counter");
  ::setenv("FAIL_AT", "1002", 1);
  require_error([&] { submit_slurm_scripts(scripts); },
                {"qat.sbatch", "exited with status 1", "Invalid partition name specified",
                 "submitted so far: ptq=1001"});
  ::unsetenv("FAIL_AT");

  // Output that is not a job id.
  write_script(fake_dir / "sbatch", "#!/bin/sh\necho 'Submitted batch job 17'\n");
  require_error([&] { submit_slurm_scripts(scripts); },
                {"ptq.sbatch", "printed 'Submitted batch job 17'", "not a job id"});
}

TEST_CASE("submit_slurm_scripts without sbatch on PATH fails clearly") {
  TempDir dir("slurm_no_sbatch");
  const auto scripts = write_slurm_scripts(sweep_plan(dir), options_in(dir));
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", (dir / "empty").string().c_str(), 1);
  require_error([&] { submit_slurm_scripts(scripts); },
                {"cannot run sbatch", "ptq.sbatch", "PATH", "submitted so far: none"});
  ::setenv("PATH", saved.c_str(), 1);
}

TEST_CASE("values that would break an #SBATCH line or a job array are rejected, naming the stage") {
  TempDir dir("slurm_errors");
  const fs::path run = dir / "run";
  auto single = [&](const SlurmResources& r) {
    ExperimentPlan plan = base_plan(run);
    plan.stages.push_back(instance(run, "ptq", "ptq", "ptq", {}, {}, r));
    return plan;
  };
  auto with = [&](auto edit) {
    SlurmResources r = one_gpu();
    edit(r);
    return single(r);
  };
  const auto opts = options_in(dir);
  require_error(
      [&] { write_slurm_scripts(with([](auto& r) { r.partition = "gpu --uid=0"; }), opts); },
      {"experiments/exp.yaml:12:3", "stage 'ptq'", "partition", "a space"});
  require_error(
      [&] { write_slurm_scripts(with([](auto& r) { r.time = "1:00\nrm -rf /"; }), opts); },
      {"stage 'ptq'", "time", "byte 0x0a"});
  require_error([&] { write_slurm_scripts(with([](auto& r) { r.account = "a#b"; }), opts); },
                {"stage 'ptq'", "account", "'#'"});
  require_error([&] { write_slurm_scripts(with([](auto& r) { r.qos = "q\"x"; }), opts); },
                {"stage 'ptq'", "qos"});
  require_error([&] { write_slurm_scripts(with([](auto& r) { r.nodes = 0; }), opts); },
                {"stage 'ptq'", "nodes 0"});
  {
    ExperimentPlan plan = single(one_gpu());
    plan.name = "my exp";
    require_error([&] { write_slurm_scripts(plan, opts); }, {"stage 'ptq'", "job-name"});
    plan = single(one_gpu());
    plan.run_dir = dir / "100%";
    require_error([&] { write_slurm_scripts(plan, opts); }, {"stage 'ptq'", "output", "'%'"});
    plan = single(one_gpu());
    plan.stages[0].program = "../../bin/sh";
    require_error([&] { write_slurm_scripts(plan, opts); }, {"stage 'ptq'", "program"});
    plan = single(one_gpu());
    plan.stages[0].stage = "a/b";
    require_error([&] { write_slurm_scripts(plan, opts); }, {"stage 'a/b'", "script"});
  }
  {
    // One job array has one resource request.
    ExperimentPlan plan = sweep_plan(dir);
    plan.stages[3].resources.gpus = 8;
    require_error([&] { write_slurm_scripts(plan, opts); },
                  {"stage 'qat'", "qat.bits-3.objective-sft", "qat.bits-3.objective-kd", "gpus",
                   "'1' vs '8'"});
  }
  {
    ExperimentPlan plan = sweep_plan(dir);
    plan.stages[2].inputs.push_back("qat.bits-2.objective-kd");
    require_error([&] { write_slurm_scripts(plan, opts); }, {"stage 'qat'", "same stage"});
    plan = sweep_plan(dir);
    plan.stages[2].inputs.push_back("nowhere");
    require_error([&] { write_slurm_scripts(plan, opts); }, {"'nowhere'", "not in the plan"});
  }
  require_error([&] { write_slurm_scripts(base_plan(run), opts); }, {"no stages"});
  require_error(
      [&] {
        write_slurm_scripts(single(one_gpu()), {dir / "slurm", "bin", dir.path()});
      },
      {"'bin'", "absolute"});
  // Nothing was written by the failed calls.
  CHECK_FALSE(fs::exists(dir / "slurm"));
}

TEST_CASE("from an experiment file: resources per tool, arrays, and hostile values run verbatim") {
  TempDir dir("slurm_yaml");
  const std::string note = "$(touch " + (dir / "CANARY").string() + ") it's `x`\\";
  write_bytes(dir / "exp.yaml",
              "name: e2e\n"
              "vars: {note: 'NOTE'}\n"
              "sweep: {grid: {bits: [3, 2]}}\n"
              "slurm:\n"
              "  partition: gpu\n"
              "  setup: ['export RQAT_FROM_SETUP=yes']\n"
              "  default: {gpus: 1, time: '01:00:00'}\n"
              "  tools: {qat-kd: {gpus: 4, nodes: 2}}\n"
              "stages:\n"
              "  ptq: {tool: ptq, args: {model: models/m, bits: '${bits}'}}\n"
              "  kd: {tool: qat-kd, inputs: {model: ptq}, args: {note: '${note}'}}\n");
  // The hostile note comes through --set, so no YAML quoting rules are involved.
  PlanOptions plan_options{dir / "exp.yaml", {"note=" + note}, dir / "run"};
  const ExperimentPlan plan = load_experiment_plan(plan_options);
  const auto scripts = write_slurm_scripts(plan, options_in(dir));
  REQUIRE(scripts.size() == 2);
  CHECK(scripts[0].instance_ids == std::vector<std::string>{"ptq.bits-3", "ptq.bits-2"});
  CHECK(scripts[1].instance_ids == std::vector<std::string>{"kd.bits-3", "kd.bits-2"});
  CHECK(scripts[1].after == std::vector<std::string>{"ptq"});
  CHECK(sbatch_lines(read_bytes(scripts[1].file)) ==
        std::vector<std::string>{"--job-name=e2e-kd",
                                 "--output=" + (dir / "run" / "logs" / "kd-%A_%a.out").string(),
                                 "--array=0-1", "--nodes=2", "--ntasks-per-node=4",
                                 "--gpus-per-node=4", "--time=01:00:00", "--partition=gpu"});
  CHECK(contains(read_bytes(scripts[0].file), "#SBATCH --gpus-per-node=1\n"));

  write_fake_tools(dir / "bin", {"ptq", "qat-kd"});
  write_script(dir / "fake" / "srun",
               "#!/bin/sh\nwhile [ $# -gt 0 ] && [ \"${1#--}\" != \"$1\" ]; do shift; done\n"
               "exec \"$@\"\n");
  {
    PathPrefix path(dir / "fake");
    REQUIRE(run_bash(dir, scripts[1].file, "SLURM_ARRAY_TASK_ID=1", dir / "out", dir / "err") == 0);
  }
  const StageInstance& kd = *plan.find("kd.bits-2");
  std::vector<std::string> expected = {(dir / "bin" / "qat-kd").string()};
  expected.insert(expected.end(), kd.argv.begin(), kd.argv.end());
  expected.push_back("setup: yes");
  CHECK(split_nul(read_bytes(dir / "out")) == expected);
  CHECK(std::find(kd.argv.begin(), kd.argv.end(), note) != kd.argv.end());
  CHECK_FALSE(fs::exists(dir / "CANARY"));
}

TEST_CASE("preemption: SIGUSR1 before the limit reaches the tool, whose exit 138 requeues the job") {
  TempDir dir("slurm_preempt");
  const fs::path run = dir / "run";
  ExperimentPlan plan = base_plan(run);
  SlurmResources r = one_gpu();
  r.signal_seconds = 300;
  r.requeue = 1;
  plan.stages.push_back(
      instance(run, "qat", "qat-kd", "qat-kd", {"--model", "models/m", "--steps", "9"}, {}, r));
  const auto scripts = write_slurm_scripts(plan, options_in(dir));
  REQUIRE(scripts.size() == 1);
  const std::string text = read_bytes(scripts[0].file);
  INFO(text);
  const auto directives = sbatch_lines(text);
  CHECK(std::count(directives.begin(), directives.end(), "--signal=B:USR1@300") == 1);
  CHECK(std::count(directives.begin(), directives.end(), "--requeue") == 1);
  CHECK_FALSE(contains(text, "exec "));
  CHECK(std::system(("bash -n " + shell_quote(scripts[0].file.string())).c_str()) == 0);

  // The run: a tool that waits for SIGUSR1, then exits 138 as the trainers do after their
  // checkpoint; an scontrol that records its arguments. SIGUSR1 goes to the batch shell only.
  const fs::path fake = dir / "fake";
  write_script(dir / "bin" / "qat-kd",
               "#!/bin/bash\ntrap 'echo got-USR1 >> " + shell_quote((dir / "tool.log").string()) +
                   "; exit 138' USR1\necho $$ > " + shell_quote((dir / "tool.pid").string()) +
                   "\nfor i in $(seq 600); do sleep 0.1; done\nexit 0\n");
  write_script(fake / "scontrol",
               "#!/bin/sh\necho \"$@\" >> " + shell_quote((dir / "scontrol.log").string()) + "\n");
  const std::string command =
      "cd " + shell_quote(dir.path().string()) + " && PATH=" + shell_quote(fake.string()) +
      ":$PATH SLURM_JOB_ID=4242 bash " + shell_quote(scripts[0].file.string()) + " > " +
      shell_quote((dir / "out").string()) + " 2> " + shell_quote((dir / "err").string()) +
      " & batch=$!; for i in $(seq 300); do [ -s " + shell_quote((dir / "tool.pid").string()) +
      " ] && break; sleep 0.05; done; kill -USR1 $batch; wait $batch; exit $?";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 138);  // the tool's own status, through the batch shell
  CHECK(read_bytes(dir / "tool.log") == "got-USR1\n");
  CHECK(read_bytes(dir / "scontrol.log") == "requeue 4242\n");
  CHECK(contains(read_bytes(dir / "err"), "stopped on SIGUSR1 with a checkpoint; requeueing"));

  // Without a preemption signal the tool replaces the shell, as before; requeue must be 0 or 1.
  plan.stages[0].resources = one_gpu();
  CHECK(contains(read_bytes(write_slurm_scripts(plan, options_in(dir))[0].file), "exec "));
  plan.stages[0].resources.requeue = 2;
  rqat::test::require_error([&] { write_slurm_scripts(plan, options_in(dir)); },
                            {"requeue 2 must be 0 or 1"});
}
