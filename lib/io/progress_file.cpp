#include "io/progress_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <ctime>

#include "io/atomic_file.h"
#include "io/host_name.h"
#include "io/tensorboard_events.h"

namespace rqat::io {

namespace {

// The rate is measured over at most this many recent updates: recent enough to follow a run that
// speeds up or slows down (evaluation, longer rollouts), long enough not to jump at every step.
constexpr size_t kRateWindow = 16;

// The process's current (or last) progress file: a tool's error handler marks it failed.
std::filesystem::path& last_progress_path() {
  static std::filesystem::path path;
  return path;
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string utc_timestamp() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

ProgressFile::ProgressFile(std::filesystem::path out_dir, std::string tool, std::string unit,
                           int64_t total, int64_t done, double min_interval_seconds)
    : path_(out_dir / "progress.json"),
      tool_(std::move(tool)),
      unit_(std::move(unit)),
      total_(total),
      done_(done),
      min_interval_(min_interval_seconds),
      start_(Clock::now()),
      last_write_(start_),
      started_utc_(utc_timestamp()),
      started_unix_(unix_seconds_now()) {
  std::filesystem::create_directories(out_dir);
  last_progress_path() = path_;
  recent_.emplace_back(start_, done_);
  write("running");
}

ProgressFile::~ProgressFile() {
  if (finished_) return;
  try {
    write("failed");
  } catch (...) {  // a destructor during unwinding must not throw; the runner's record remains
  }
}

void ProgressFile::update(int64_t done, const Json& metrics, bool force) {
  done_ = done;
  for (const auto& [key, value] : metrics.items()) metrics_[key] = value;
  const auto now = Clock::now();
  if (recent_.empty() || recent_.back().second != done) recent_.emplace_back(now, done);
  while (recent_.size() > kRateWindow) recent_.pop_front();
  if (!force && done < total_ && seconds_between(last_write_, now) < min_interval_) return;
  write("running");
}

void ProgressFile::finish(std::string_view state, const Json& metrics) {
  for (const auto& [key, value] : metrics.items()) metrics_[key] = value;
  finished_ = true;
  write(state);
}

void ProgressFile::write(std::string_view state) {
  const auto now = Clock::now();
  last_write_ = now;
  double rate = 0;
  if (recent_.size() >= 2) {
    const double span = seconds_between(recent_.front().first, recent_.back().first);
    if (span > 0) rate = static_cast<double>(recent_.back().second - recent_.front().second) / span;
  }
  Json json;
  json["tool"] = tool_;
  json["state"] = state;
  json["unit"] = unit_;
  json["done"] = done_;
  json["total"] = total_;
  json["rate"] = rate;
  if (rate > 0 && state == "running")
    json["eta_seconds"] = static_cast<double>(total_ - done_) / rate;
  else
    json["eta_seconds"] = nullptr;
  json["elapsed_seconds"] = seconds_between(start_, now);
  json["started_utc"] = started_utc_;
  json["started_unix"] = started_unix_;
  json["updated_utc"] = utc_timestamp();
  json["updated_unix"] = unix_seconds_now();
  json["pid"] = static_cast<int64_t>(getpid());
  json["host"] = host_name();
  json["metrics"] = metrics_;
  write_text_atomically(path_, json.dump(2) + "\n");
}

void note_failure_in_progress(std::string_view message) {
  const auto& path = last_progress_path();
  if (path.empty()) return;
  try {
    Json json = read_json_file(path);
    if (json.value("state", "") == "stopped") return;  // a clean stop is not a failure
    json["state"] = "failed";
    json["error"] = message;
    json["updated_utc"] = utc_timestamp();
    json["updated_unix"] = unix_seconds_now();
    write_text_atomically(path, json.dump(2) + "\n");
  } catch (...) {  // reporting the failure must not hide the original error
  }
}

Json read_progress(const std::filesystem::path& out_dir) {
  return read_json_file_or_null(out_dir / "progress.json");
}

}  // namespace rqat::io
