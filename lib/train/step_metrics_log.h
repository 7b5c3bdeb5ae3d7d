// Metrics over training steps: metrics.jsonl (one object per line, appended and flushed as the run
// goes, for `tail -f` and live plots), metrics.h5 (the same numbers as HDF5 columns, rewritten
// at each checkpoint and at the end; `rqat report` and scripts/plot.py read it) and, when asked,
// TensorBoard event files (every number of every row as the scalar "<series>/<key>" at the row's
// step, and text summaries; written as rows come, for `tensorboard --logdir` while the run goes).
//
// Rows belong to a series ("train" every logged step, "eval" at evaluation steps); each series is
// an HDF5 group whose columns are the union of its rows' numeric keys (NaN where a row lacks one),
// with "step" always present. A resumed run first drops the rows after its checkpoint's step, so
// both files hold exactly one row per step of one uninterrupted history.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "io/tensorboard_events.h"

namespace rqat::train {

class StepMetricsLog {
 public:
  // Files go to dir/metrics.jsonl and dir/metrics.h5. A non-writer (data-parallel rank > 0) keeps
  // rows in memory only.
  StepMetricsLog(std::filesystem::path dir, bool writer);

  // Starts a fresh history (removes an existing metrics.jsonl) ...
  void start_fresh();
  // ... or continues one: keeps the rows of metrics.jsonl with step <= `step` and rewrites it.
  void resume_at(int64_t step);

  // From now on also writes TensorBoard events into `dir`: a new event file per process start
  // (a resumed run's file continues at its checkpoint's step), on the writer only.
  void write_tensorboard(const std::filesystem::path& dir);
  // A markdown text at `step` (TensorBoard's text tab); nothing without write_tensorboard.
  void add_text(const std::string& tag, const std::string& markdown, int64_t step);

  // Appends a row (its "step" must be set) to `series`; its numbers reach TensorBoard at once.
  void append(const std::string& series, io::Json row);
  void write_hdf5(const std::map<std::string, std::string>& attributes) const;

  const std::vector<std::pair<std::string, io::Json>>& rows() const { return rows_; }
  std::filesystem::path jsonl_path() const { return dir_ / "metrics.jsonl"; }
  std::filesystem::path hdf5_path() const { return dir_ / "metrics.h5"; }

 private:
  std::filesystem::path dir_;
  bool writer_;
  std::vector<std::pair<std::string, io::Json>> rows_;  // (series, row) in order
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;
};

}  // namespace rqat::train
