// eval-math's TensorBoard events (OUT/tb, docs/experiments.md "Watching runs"):
//   live, as samples finish (step = samples finished): generation/tokens_per_second,
//     generation/mean_tokens, generation/truncated_share;
//   at the end: every numeric column of results.h5 as "samples/<column>" at step = its row, the
//     overall metrics of summary.json as "summary/<metric>" (nested keys joined by '/') at step =
//     the number of samples, the settings as text at step 0, and a few completions with their
//     grades and rewards as text.
#pragma once

#include <filesystem>
#include <memory>

#include "eval/sample_summary.h"
#include "io/hdf5_columns.h"
#include "io/json_file.h"
#include "io/tensorboard_events.h"
#include "tools/eval_run/eval_outputs.h"

namespace rqat::eval {

class EvalTensorBoard {
 public:
  // A new event file in `dir`, starting with the settings text.
  EvalTensorBoard(const std::filesystem::path& dir, const io::Json& settings);

  // After each finished sample: the running generation numbers at step `samples_done`.
  void sample_finished(int64_t samples_done, int64_t tokens, bool truncated,
                       double tokens_per_second);

  // The run's results (results.h5's columns, the summary, a few completions); flushes.
  void finish(const io::Hdf5Columns& results, const EvalSummary& summary,
              const EvalRecords& records);

 private:
  io::TensorBoardWriter writer_;
  int64_t finished_ = 0, tokens_ = 0, truncated_ = 0;  // samples this process finished
};

}  // namespace rqat::eval
