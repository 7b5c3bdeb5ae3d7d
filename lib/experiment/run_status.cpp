#include "experiment/run_status.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <thread>
#include <tuple>

#include "experiment/experiment_plan.h"
#include "experiment/run_report.h"
#include "experiment/stage_process.h"
#include "experiment/stage_runner.h"
#include "io/error.h"
#include "io/host_name.h"
#include "io/json_file.h"
#include "io/manifest.h"
#include "io/progress_file.h"
#include "io/tensorboard_events.h"

namespace rqat::experiment {

namespace fs = std::filesystem;

namespace {

// The plan with its instances' directories where they are now (the run directory may have moved,
// or plan.json been written from another working directory).
ExperimentPlan plan_at(const fs::path& run_dir) {
  ExperimentPlan plan = read_run_plan(run_dir);
  for (auto& s : plan.stages) s.out_dir = instance_dir(run_dir, s);
  plan.run_dir = run_dir;
  return plan;
}

// The last line of a log that says what went wrong: the tools' "TOOL: error: ..." line, else the
// last line with text.
std::string error_line(const fs::path& log) {
  const std::string tail = tail_of_file(log, 40);
  std::string last, error;
  size_t begin = 0;
  while (begin < tail.size()) {
    size_t end = tail.find('\n', begin);
    if (end == std::string::npos) end = tail.size();
    const std::string line = tail.substr(begin, end - begin);
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
    if (line.find("error:") != std::string::npos) error = line;
    begin = end + 1;
  }
  return error.empty() ? last : error;
}

// The stage's log: the runner's, else SLURM's output files of its stage (their pattern).
fs::path log_of(const ExperimentPlan& plan, const StageInstance& s) {
  const fs::path runner_log = stage_log_file(plan, s);
  if (fs::exists(runner_log)) return runner_log;
  // rqat sbatch: one output file per job (array task), named after the stage.
  fs::path newest;
  fs::file_time_type newest_time{};
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(plan.run_dir / "logs", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(s.stage + "-", 0) != 0 || entry.path().extension() != ".out") continue;
    const auto time = entry.last_write_time(error);
    if (newest.empty() || time > newest_time) newest = entry.path(), newest_time = time;
  }
  return newest.empty() ? plan.run_dir / "logs" / (s.stage + "-*.out") : newest;
}

std::string percent(double share) { return fmt::format("{:.1f}%", 100 * share); }

// A few numbers that say how a stage is doing, in a fixed order: (key, name shown, how).
enum class Shown { kDecimal, kPercent, kRate };
std::string latest_numbers(const io::Json& metrics) {
  if (!metrics.is_object()) return "";
  static const std::vector<std::tuple<const char*, const char*, Shown>> shown = {
      {"loss", "loss", Shown::kDecimal},
      {"final_loss", "loss", Shown::kDecimal},
      {"reward", "reward", Shown::kDecimal},
      {"final_reward", "reward", Shown::kDecimal},
      {"eval_accuracy", "eval acc", Shown::kPercent},
      {"eval_pass@1", "eval acc", Shown::kPercent},
      {"accuracy", "acc", Shown::kPercent},
      {"pass@1", "acc", Shown::kPercent},
      {"mean_reward", "mean reward", Shown::kDecimal},
      {"tokens_per_second", "tok/s", Shown::kRate},
      {"mean_relative_error", "rel err", Shown::kDecimal},
  };
  std::vector<std::string> parts;
  std::set<std::string> seen;  // one value per name shown
  for (const auto& [key, name, how] : shown) {
    if (!metrics.contains(key) || !metrics[key].is_number() || !seen.insert(name).second) continue;
    const double v = metrics[key].get<double>();
    const std::string text = how == Shown::kPercent ? percent(v)
                             : how == Shown::kRate  ? fmt::format("{:.0f}", v)
                                                    : fmt::format("{:.4f}", v);
    parts.push_back(fmt::format("{} {}", name, text));
  }
  return fmt::format("{}", fmt::join(parts, "  "));
}

// Whether a progress file's writer is gone: it ran on this host and its pid is no longer there.
bool writer_is_gone(const io::Json& progress) {
  const std::string host = io::host_name();
  if (host.empty() || progress.value("host", "") != host || !progress.contains("pid")) return false;
  const auto pid = static_cast<pid_t>(progress["pid"].get<int64_t>());
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

bool is_stop_code(int code) {
  return code == 128 + SIGTERM || code == 128 + SIGINT || code == 128 + SIGUSR1;
}

StageStatus stage_status(const ExperimentPlan& plan, const StageInstance& s,
                         const std::map<std::string, std::string>& states) {
  StageStatus st;
  st.id = s.id;
  st.tool = s.tool;
  st.label = s.label;
  const io::Json record = io::read_json_file_or_null(stage_record_file(plan, s));
  const io::Json progress = io::read_progress(s.out_dir);
  const std::string recorded = record.is_object() ? record.value("status", "") : "";
  const std::string progressed = progress.is_object() ? progress.value("state", "") : "";
  if (progress.is_object()) {
    st.unit = progress.value("unit", "");
    if (progress.contains("done")) st.done = progress["done"].get<int64_t>();
    if (progress.contains("total")) st.total = progress["total"].get<int64_t>();
    st.latest = latest_numbers(progress.value("metrics", io::Json::object()));
  }

  // Under SLURM no runner keeps records (and so no input stamps): the manifest alone says it.
  const bool finished =
      record.is_object() ? stage_is_finished(plan, s) : manifest_records_arguments(s);
  if (finished) {
    st.state = "finished";
    const io::Json manifest = io::read_manifest_or_null(s.out_dir);
    if (manifest.is_object()) st.latest = latest_numbers(manifest.value("metrics", io::Json()));
    return st;
  }
  const int exit_code = record.is_object() ? record.value("exit_code", -1) : -1;
  if (progressed == "stopped" || (recorded == "failed" && is_stop_code(exit_code))) {
    st.state = "stopped";
    st.log = log_of(plan, s);
    st.detail = "by a signal; rerunning continues it";
    return st;
  }
  if (recorded == "failed" || progressed == "failed") {
    st.state = "failed";
    st.log = log_of(plan, s);
    std::string error = progress.is_object() ? progress.value("error", "") : "";
    if (error.empty()) error = error_line(st.log);
    st.detail = recorded == "failed" ? fmt::format("exit {}: {}", exit_code, error) : error;
    return st;
  }
  if (recorded == "blocked") {
    st.state = "blocked";
    st.detail = "an input failed";
    return st;
  }
  if (progressed == "running" || progressed == "done" || recorded == "running") {
    if (progress.is_object() && writer_is_gone(progress)) {
      st.state = "lost";
      st.log = log_of(plan, s);
      st.detail = fmt::format("process {} is gone without a word (killed?); rerun to continue",
                              progress["pid"].get<int64_t>());
      return st;
    }
    st.state = "running";
    if (progressed == "running" && progress["eta_seconds"].is_number())
      st.eta_seconds = progress["eta_seconds"].get<double>();
    if (progress.is_object()) {
      const double age = io::unix_seconds_now() - progress.value("updated_unix", 0.0);
      st.detail = progressed == "done" ? "writing its outputs"
                                       : fmt::format("updated {} ago", io::format_duration(age));
    }
    return st;
  }
  std::vector<std::string> on, failed;
  for (const auto& input : s.inputs) {
    const auto it = states.find(input);
    const std::string state = it == states.end() ? "" : it->second;
    if (state == "failed" || state == "blocked" || state == "lost")
      failed.push_back(input);
    else if (state != "finished")
      on.push_back(input);
  }
  // Under SLURM no runner records "blocked": a job whose dependency failed never starts.
  st.state = failed.empty() ? "waiting" : "blocked";
  st.detail = !failed.empty() ? fmt::format("input {} did not finish", fmt::join(failed, ", "))
              : on.empty()    ? "ready"
                              : fmt::format("on {}", fmt::join(on, ", "));
  return st;
}

std::string progress_text(const StageStatus& s) {
  if (!s.done || !s.total || *s.total <= 0) return "";
  const std::string share = percent(static_cast<double>(*s.done) / static_cast<double>(*s.total));
  if (s.unit == "steps") return fmt::format("step {}/{} {}", *s.done, *s.total, share);
  return fmt::format("{}/{} {} {}", *s.done, *s.total, s.unit, share);
}

}  // namespace

bool RunStatus::settled() const {
  return std::none_of(stages.begin(), stages.end(), [](const StageStatus& s) {
    return s.state == "running" || s.state == "waiting";
  });
}

RunStatus collect_run_status(const fs::path& run_dir) {
  const ExperimentPlan plan = plan_at(run_dir);
  RunStatus status;
  status.name = plan.name;
  status.run_dir = run_dir;
  std::map<std::string, std::string> states;  // id -> state, inputs before their users
  for (const auto& s : plan.stages) {
    status.stages.push_back(stage_status(plan, s, states));
    states[s.id] = status.stages.back().state;
  }
  return status;
}

std::string format_run_status(const RunStatus& status) {
  std::map<std::string, int> counts;
  for (const auto& s : status.stages) ++counts[s.state];
  std::vector<std::string> summary;
  for (const char* state :
       {"finished", "running", "stopped", "failed", "lost", "blocked", "waiting"})
    if (counts[state] > 0) summary.push_back(fmt::format("{} {}", counts[state], state));
  std::string text = fmt::format("{} ({}): {} stage instance{}: {}\n", status.name,
                                 status.run_dir.string(), status.stages.size(),
                                 status.stages.size() == 1 ? "" : "s", fmt::join(summary, ", "));

  std::vector<std::vector<std::string>> rows = {
      {"stage", "tool", "state", "progress", "ETA", "latest", "detail"}};
  for (const auto& s : status.stages) {
    std::string detail = s.detail;
    if (s.state == "failed" || s.state == "lost" || s.state == "stopped")
      detail += fmt::format(" (log {})", s.log.string());
    rows.push_back({s.id, s.tool, s.state, progress_text(s),
                    s.eta_seconds ? io::format_duration(*s.eta_seconds) : "", s.latest, detail});
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c)
      line += c + 1 == row.size() ? row[c] : fmt::format("{:<{}}  ", row[c], width[c]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line + "\n";
  }
  return text;
}

void watch_run_status(const fs::path& run_dir, double seconds, bool clear_screen,
                      std::ostream& out) {
  if (!(seconds > 0)) fail("--watch: the interval must be > 0 seconds, got {}", seconds);
  while (true) {
    const RunStatus status = collect_run_status(run_dir);
    if (clear_screen) out << "\x1b[H\x1b[2J";  // cursor home, clear screen
    out << fmt::format("[{}]\n", io::utc_timestamp()) << format_run_status(status);
    if (!clear_screen) out << "\n";
    out.flush();
    if (status.settled()) return;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
}

}  // namespace rqat::experiment
