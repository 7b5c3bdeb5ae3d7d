#include "experiment/stage_runner.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "experiment/memory_preview.h"
#include "experiment/stage_process.h"
#include "experiment/tool_flags.h"
#include "io/artifact.h"
#include "io/error.h"
#include "io/json_file.h"
#include "io/manifest.h"
#include "io/progress_file.h"

namespace rqat::experiment {

namespace {

std::vector<std::string> without_resume(std::vector<std::string> args) {
  args.erase(std::remove(args.begin(), args.end(), "--resume"), args.end());
  return args;
}

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

// Installs SIGINT/SIGTERM handlers for the run's lifetime (no SA_RESTART: waitpid must return).
class SignalScope {
 public:
  SignalScope() {
    g_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// The selected instances: all, or the --only stages and everything they need.
std::vector<const StageInstance*> select_stages(const ExperimentPlan& plan,
                                                const RunOptions& options) {
  std::set<std::string> stage_names;
  for (const auto& s : plan.stages) stage_names.insert(s.stage);
  for (const auto* list : {&options.only, &options.force})
    for (const auto& name : *list)
      if (!stage_names.count(name))
        fail("--{} {}: no such stage in {} (stages: {})", list == &options.only ? "only" : "force",
             name, plan.experiment_file.string(), fmt::join(stage_names, ", "));
  std::set<std::string> wanted;
  for (auto it = plan.stages.rbegin(); it != plan.stages.rend(); ++it) {
    const bool selected = options.only.empty() ||
                          std::count(options.only.begin(), options.only.end(), it->stage) ||
                          wanted.count(it->id);
    if (!selected) continue;
    wanted.insert(it->id);
    for (const auto& input : it->inputs) wanted.insert(input);
  }
  std::vector<const StageInstance*> selected;
  for (const auto& s : plan.stages)
    if (wanted.count(s.id)) selected.push_back(&s);
  return selected;
}

// Identifies one run of a stage: its manifest's modification time (a rerun rewrites it).
std::string output_stamp(const ExperimentPlan& plan, const StageInstance& stage) {
  std::error_code error;
  auto time = std::filesystem::last_write_time(stage.out_dir / io::kManifestFile, error);
  // Tools without a manifest: the runner's record of when the stage finished.
  if (error) time = std::filesystem::last_write_time(stage_record_file(plan, stage), error);
  return error ? "" : std::to_string(time.time_since_epoch().count());
}

// The stamps of a stage's inputs as they are now.
io::Json input_stamps(const ExperimentPlan& plan, const StageInstance& stage) {
  io::Json stamps = io::Json::object();
  for (const auto& id : stage.inputs)
    if (const auto* input = plan.find(id)) stamps[id] = output_stamp(plan, *input);
  return stamps;
}

void write_record(const ExperimentPlan& plan, const StageInstance& stage, const std::string& status,
                  double seconds, int exit_code) {
  io::write_json_file(stage_record_file(plan, stage), {{"status", status},
                                                       {"seconds", seconds},
                                                       {"exit_code", exit_code},
                                                       {"argv", stage.argv},
                                                       {"inputs", input_stamps(plan, stage)},
                                                       {"finished_utc", io::utc_timestamp()}});
}

// True when the stage's last attempt was interrupted or failed with exactly these arguments and
// inputs and left a checkpoint: then it continues (--resume) rather than starting over.
bool resumes_interrupted_attempt(const ExperimentPlan& plan, const StageInstance& stage,
                                 bool forced) {
  if (forced || !takes_resume(stage) ||
      !std::filesystem::exists(stage.out_dir / "checkpoints" / "latest"))
    return false;
  try {
    const auto record = io::read_json_file(stage_record_file(plan, stage));
    const std::string status = record.value("status", "");
    return (status == "running" || status == "failed") &&
           record.at("argv").get<std::vector<std::string>>() == stage.argv &&
           record.value("inputs", io::Json::object()) == input_stamps(plan, stage);
  } catch (const std::exception&) {
    return false;  // no readable record: nothing says the checkpoint belongs to this configuration
  }
}

void print_plan(const ExperimentPlan& plan, const std::vector<const StageInstance*>& selected,
                const RunOptions& options, std::ostream& out) {
  int missing = 0;
  std::map<std::vector<std::string>, std::string> memory_plans;
  for (size_t i = 0; i < selected.size(); ++i) {
    const auto& s = *selected[i];
    const bool forced = std::count(options.force.begin(), options.force.end(), s.stage) > 0;
    const bool finished = !forced && stage_is_finished(plan, s);
    out << fmt::format("[{:>2}/{}] {}{}\n", i + 1, selected.size(), s.id,
                       finished ? "  (finished: skip)" : "");
    if (!s.inputs.empty()) out << fmt::format("        needs: {}\n", fmt::join(s.inputs, ", "));
    out << "        " << display_command(std::vector<std::string>{s.program}) << " "
        << display_command(s.argv) << "\n";
    for (const auto& path : s.missing_paths) {
      out << fmt::format("        warning: {} does not exist\n", path);
      ++missing;
    }
    // Training stages with GPUs: what each rank will hold, and whether it fits.
    out << stage_memory_plan(plan, s, options.bin_dir, "        ", memory_plans);
  }
  if (missing)
    out << fmt::format("{} input path{} missing: `rqat run` refuses to start until they exist\n",
                       missing, missing == 1 ? " is" : "s are");
}

// A program the plan uses that is not executable in --bin-dir (the last such in name order), or "".
std::string missing_tool(const ExperimentPlan& plan, const std::filesystem::path& bin_dir) {
  std::set<std::string> programs;
  for (const auto& s : plan.stages) programs.insert(s.program);
  std::string missing;
  for (const auto& program : programs)
    if (access((bin_dir / program).c_str(), X_OK) != 0) missing = program;
  return missing;
}

bool is_forced(const RunOptions& options, const StageInstance& s) {
  return std::count(options.force.begin(), options.force.end(), s.stage) > 0;
}

// One execution of the selected stages: starts each when its inputs are done and a job slot is
// free, waits for the children, and keeps the state the final summary needs.
class PlanRun {
 public:
  PlanRun(const ExperimentPlan& plan, const RunOptions& options,
          const std::vector<const StageInstance*>& selected, std::ostream& out)
      : plan_(plan),
        options_(options),
        selected_(selected),
        out_(out),
        pending_(selected.begin(), selected.end()),
        run_start_(Clock::now()) {}

  int run() {
    while (!pending_.empty() || !running_.empty()) {
      start_ready();
      if (running_.empty()) {
        if (g_signal != 0 || pending_.empty()) break;
        continue;  // everything pending was just marked blocked or skipped
      }
      wait_for_stage();
    }
    return summarize();
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Running {
    const StageInstance* stage;
    Clock::time_point start;
  };

  std::string position(const StageInstance& s) const {
    const auto it = std::find(selected_.begin(), selected_.end(), &s);
    return fmt::format("[{:>2}/{}]", it - selected_.begin() + 1, selected_.size());
  }

  // Start what is ready, in plan order, while there is room; no new stage after a signal.
  void start_ready() {
    for (auto it = pending_.begin(); g_signal == 0 && it != pending_.end();) {
      if (settle(**it))
        it = pending_.erase(it);
      else
        ++it;
    }
  }

  // Decides a pending stage: not run (an input failed), skipped (finished earlier) or started.
  // Returns false while it must wait for its inputs or for a job slot.
  bool settle(const StageInstance& s) {
    bool ready = true, blocked = false;
    for (const auto& input : s.inputs) {
      const auto st = state_.find(input);
      if (st == state_.end())
        ready = false;
      else if (st->second == "failed" || st->second == "blocked")
        blocked = true;
    }
    if (blocked) {
      state_[s.id] = "blocked";
      write_record(plan_, s, "blocked", 0, -1);
      out_ << fmt::format("{} {}: not run (an input failed)\n", position(s), s.id);
      return true;
    }
    if (!ready || static_cast<int>(running_.size()) >= std::max(1, options_.jobs)) return false;
    const bool forced = is_forced(options_, s);
    if (!forced && stage_is_finished(plan_, s)) {
      state_[s.id] = "skipped";
      out_ << fmt::format("{} {}: finished earlier, skipped\n", position(s), s.id);
      return true;
    }
    start(s, forced);
    return true;
  }

  void start(const StageInstance& s, bool forced) {
    std::vector<std::string> args{(options_.bin_dir / s.program).string()};
    args.insert(args.end(), s.argv.begin(), s.argv.end());
    if (resumes_interrupted_attempt(plan_, s, forced)) {
      args.push_back("--resume");
    } else {
      // A new configuration (or new inputs) starts over in an empty directory (run_dir / id, the
      // runner's own): checkpoints of another run of this stage must not be continued, and an
      // export refuses to write over another.
      std::filesystem::remove_all(s.out_dir);
    }
    // A stale manifest must never make a half-rerun stage look finished.
    std::filesystem::remove(s.out_dir / io::kManifestFile);
    write_record(plan_, s, "running", 0, -1);
    const auto log = stage_log_file(plan_, s);
    {
      std::ofstream header(log, std::ios::app);
      header << fmt::format("=== {} rqat run: {}\n", io::utc_timestamp(), display_command(args));
    }
    const pid_t pid = spawn_logged(args.front(), args, log);
    running_[pid] = {&s, Clock::now()};
    out_ << fmt::format("{} {}: running {}{} (log {})\n", position(s), s.id, s.tool,
                        args.back() == "--resume" ? " --resume" : "", log.string());
    out_.flush();
  }

  // Waits for one child to end (or for a signal, which is passed on to the running stages).
  void wait_for_stage() {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno != EINTR) fail("rqat run: waitpid failed: {}", std::strerror(errno));
      forward_signal();
      return;
    }
    const auto it = running_.find(pid);
    if (it == running_.end()) return;
    const StageInstance& s = *it->second.stage;
    const double seconds = std::chrono::duration<double>(Clock::now() - it->second.start).count();
    running_.erase(it);
    finish(s, exit_code_of(status), seconds);
  }

  // Forward the signal once to every stage (they are in their own process groups): training
  // stages write a checkpoint and exit, so the next `rqat run` resumes them.
  void forward_signal() {
    if (g_signal == 0 || forwarded_ == g_signal) return;
    forwarded_ = g_signal;
    out_ << fmt::format("signal {}: stopping {} running stage{}\n", forwarded_, running_.size(),
                        running_.size() == 1 ? "" : "s");
    for (const auto& [child, r] : running_) kill(child, forwarded_);
  }

  void finish(const StageInstance& s, int code, double seconds) {
    if (code == 0) {
      state_[s.id] = "done";
      write_record(plan_, s, "done", seconds, 0);
      out_ << fmt::format("{} {}: done in {:.1f} s\n", position(s), s.id, seconds);
    } else {
      state_[s.id] = "failed";
      write_record(plan_, s, "failed", seconds, code);
      const auto log = stage_log_file(plan_, s);
      out_ << fmt::format("{} {}: FAILED (exit {}) after {:.1f} s; log: {}\n", position(s), s.id,
                          code, seconds, log.string());
      out_ << tail_of_file(log, 6);
      failures_.push_back(fmt::format("{} (log {})", s.id, log.string()));
    }
    out_.flush();
  }

  int summarize() {
    const double total = std::chrono::duration<double>(Clock::now() - run_start_).count();
    if (g_signal != 0) {
      out_ << fmt::format("interrupted after {:.1f} s; rerun the same command to continue\n",
                          total);
      return 128 + g_signal;
    }
    int done = 0, skipped = 0, blocked = 0;
    for (const auto& [id, st] : state_) {
      done += st == "done";
      skipped += st == "skipped";
      blocked += st == "blocked";
    }
    out_ << fmt::format("{} ran, {} skipped, {} failed, {} not run, in {:.1f} s\n", done, skipped,
                        failures_.size(), blocked, total);
    for (const auto& f : failures_) out_ << "failed: " << f << "\n";
    return failures_.empty() ? 0 : 1;
  }

  const ExperimentPlan& plan_;
  const RunOptions& options_;
  const std::vector<const StageInstance*>& selected_;
  std::ostream& out_;
  std::vector<const StageInstance*> pending_;
  const Clock::time_point run_start_;
  std::map<pid_t, Running> running_;
  std::map<std::string, std::string> state_;  // id -> done, skipped, failed, blocked
  std::vector<std::string> failures_;
  int forwarded_ = 0;
};

}  // namespace

std::filesystem::path stage_log_file(const ExperimentPlan& plan, const StageInstance& stage) {
  return plan.run_dir / "logs" / (stage.id + ".log");
}

std::filesystem::path stage_record_file(const ExperimentPlan& plan, const StageInstance& stage) {
  return plan.run_dir / "logs" / (stage.id + ".json");
}

bool manifest_records_arguments(const StageInstance& stage) {
  try {
    const auto manifest = io::read_manifest(stage.out_dir);
    auto args = manifest.at("args").get<std::vector<std::string>>();
    if (args.empty()) return false;
    args.erase(args.begin());  // the program path: builds move, the configuration does not
    return without_resume(args) == stage.argv;
  } catch (const std::exception&) {
    return false;  // missing or unreadable
  }
}

bool stage_is_finished(const ExperimentPlan& plan, const StageInstance& stage) {
  try {
    const auto record_file = stage_record_file(plan, stage);
    const bool has_record = std::filesystem::is_regular_file(record_file);
    const auto record = has_record ? io::read_json_file(record_file) : io::Json::object();
    // An input that ran again since this stage ran makes this stage's output stale.
    if (!stage.inputs.empty() &&
        (!has_record || record.value("inputs", io::Json::object()) != input_stamps(plan, stage)))
      return false;
    if (std::filesystem::is_regular_file(stage.out_dir / io::kManifestFile))
      return manifest_records_arguments(stage);
    // No manifest: trust the runner's record, as long as what the stage wrote is still there.
    const auto out = std::find(stage.argv.begin(), stage.argv.end(), "--out");
    if (out != stage.argv.end() && out + 1 != stage.argv.end() &&
        !std::filesystem::exists(*(out + 1)))
      return false;
    return has_record && record.value("status", "") == "done" &&
           record.at("argv").get<std::vector<std::string>>() == stage.argv;
  } catch (const std::exception&) {
    return false;  // unreadable: run the stage again rather than trust it
  }
}

int run_plan(const ExperimentPlan& plan, const RunOptions& options, std::ostream& out) {
  const auto selected = select_stages(plan, options);
  out << fmt::format("experiment {} ({}): {} stage{}, run directory {}\n", plan.name,
                     plan.experiment_file.string(), selected.size(),
                     selected.size() == 1 ? "" : "s", plan.run_dir.string());
  if (!plan.description.empty()) out << "  " << plan.description << "\n";
  // Flags are checked against the tools when they are all there; a dry run works without them.
  const std::string missing = missing_tool(plan, options.bin_dir);
  if (missing.empty()) {
    check_stage_flags(plan, options.bin_dir);
  } else if (!options.dry_run) {
    fail("--bin-dir {}: no executable '{}' there", options.bin_dir.string(), missing);
  }
  if (options.dry_run) {
    print_plan(plan, selected, options, out);
    if (!missing.empty())
      out << fmt::format("note: no '{}' in {}: flags were not checked against the tools\n", missing,
                         options.bin_dir.string());
    return 0;
  }
  for (const auto* s : selected)
    for (const auto& path : s->missing_paths)
      fail("{} does not exist (an input of stage {})", path, s->id);

  std::filesystem::create_directories(plan.run_dir / "logs");
  write_plan(plan.run_dir / "plan.json", plan);

  const SignalScope signals;  // before the first stage starts, until the last one ended
  return PlanRun(plan, options, selected, out).run();
}

}  // namespace rqat::experiment
