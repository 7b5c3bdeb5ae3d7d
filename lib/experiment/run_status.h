// `rqat status RUN_DIR [--watch]`: where every stage instance of an experiment is, while `rqat run`
// or SLURM jobs are at work. It reads only small files that writers replace atomically or append
// to: plan.json, the runner's logs/<id>.json records and logs, each stage's manifest.json and
// progress.json (io/progress_file.h); never an HDF5 file a writer may hold open.
//
// A stage instance is
//   finished  its manifest records the planned arguments (as `rqat run` decides to skip it; under
//             SLURM, where no runner records inputs' stamps, the manifest alone);
//   running   its progress file (or the runner's record) says so; with step or sample counts,
//             ETA from the recent rate and its latest loss / reward / accuracy;
//   stopped   by a signal with a checkpoint or kept samples (rerunning continues it);
//   failed    the runner's record or its progress file says so: the error line and the log;
//   lost      its progress file says running, but the process that wrote it, on this host, is gone;
//   blocked   an input failed (or was lost), so it cannot start;
//   waiting   not started: on which inputs, or "ready" when they are all finished.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "io/json_file.h"

namespace rqat::experiment {

struct StageStatus {
  std::string id, tool, label;
  std::string state;                 // one of the words above
  std::optional<int64_t> done, total;  // steps or samples, from progress.json
  std::string unit;                  // "steps", "samples"
  std::optional<double> eta_seconds;
  std::string latest;  // "loss 0.4123  acc 52.0%", from progress.json or the manifest
  std::string detail;  // waiting: "on a, b"; failed: the error; running: "updated 5s ago"
  // The log of a failed, stopped or lost stage (the runner's, or its newest SLURM output file).
  std::filesystem::path log;
};

struct RunStatus {
  std::string name;
  std::filesystem::path run_dir;
  std::vector<StageStatus> stages;  // plan order
  // True when no stage is running or waiting (all finished, failed, stopped, lost or blocked):
  // where --watch stops.
  bool settled() const;
};

// Fails with one line when RUN_DIR has no plan.json.
RunStatus collect_run_status(const std::filesystem::path& run_dir);

// The table, with a header line counting the states.
std::string format_run_status(const RunStatus& status);

// Prints the table every `seconds` until the run settles (then once more) or the process is
// interrupted. clear_screen: redraw in place (a terminal); else the tables follow each other,
// each under a time stamp (a log file).
void watch_run_status(const std::filesystem::path& run_dir, double seconds, bool clear_screen,
                      std::ostream& out);

}  // namespace rqat::experiment
