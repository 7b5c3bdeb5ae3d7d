// OUT/progress.json: where a running stage is, for `rqat status` (docs/experiments.md). A small
// JSON file replaced atomically (write, fsync, rename) as the stage goes, so a reader on another
// node or another process sees a whole file or the previous one, never the HDF5 files a writer
// holds open. Fields:
//   tool, state ("running", "stopped": by a signal with a checkpoint, "done": the work is over and
//   the outputs are being written or are written, "failed"), unit ("steps", "samples"), done,
//   total, rate (units per second over the last updates), eta_seconds (from that rate), elapsed
//   seconds, started/updated times (UTC text and Unix seconds), pid and host of the writer,
//   metrics (the last numbers the stage reported: loss, reward, accuracy...), error (when failed).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "io/json_file.h"

namespace rqat::io {

class ProgressFile {
 public:
  // Starts the file at `done` of `total` (a resumed run starts past 0), state "running". While
  // this object lives it is the process's current progress file (note_failure_in_progress).
  // min_interval_seconds: updates closer together than this are not written (the state and
  // the last update always are).
  ProgressFile(std::filesystem::path out_dir, std::string tool, std::string unit, int64_t total,
               int64_t done = 0, double min_interval_seconds = 2.0);
  // Unless finish() was called: written as "failed" (an exception is unwinding the stage).
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;

  // `metrics` are merged into the file's metrics (keys keep their last value).
  void update(int64_t done, const Json& metrics = Json::object(), bool force = false);
  // The last write: state "done" or "stopped".
  void finish(std::string_view state, const Json& metrics = Json::object());

  const std::filesystem::path& path() const { return path_; }

 private:
  using Clock = std::chrono::steady_clock;
  void write(std::string_view state);

  std::filesystem::path path_;
  std::string tool_, unit_;
  int64_t total_ = 0, done_ = 0;
  double min_interval_ = 0;
  Json metrics_ = Json::object();
  Clock::time_point start_, last_write_;
  std::string started_utc_;
  double started_unix_ = 0;
  std::deque<std::pair<Clock::time_point, int64_t>> recent_;  // (time, done) of recent updates
  bool finished_ = false;
};

// After a tool failed with `message`: the process's last progress file (if any) says "failed"
// with this error, so `rqat status` shows it also where no runner recorded the exit (SLURM).
void note_failure_in_progress(std::string_view message);

// The stage's progress.json, or null when there is none or it cannot be read.
Json read_progress(const std::filesystem::path& out_dir);

// "45s", "3m07s", "2h05m"; "?" for a negative or non-finite number (progress lines, status).
std::string format_duration(double seconds);

// UTC now as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_timestamp();

}  // namespace rqat::io
