// `rqat report RUN_DIR`: what a finished (or partly finished) run produced, as tables in the shape
// of the papers' tables. The results table has one row per evaluated model (its label), a bits
// column and one pass@1 column per benchmark (plus their average); the stage table lists every
// stage instance with its status, time and a few summary metrics. Both render as markdown and CSV.
// Reads plan.json, each instance's manifest.json / summary.json and the runner's logs/<id>.json; a
// stage that never ran or failed is reported as such, not an error.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "experiment/experiment_plan.h"
#include "experiment/findings.h"
#include "io/json_file.h"

namespace rqat::experiment {

// Where an instance's outputs are: run_dir/<id> (the runner's layout, and still right when the run
// directory was moved or plan.json recorded a path relative to another working directory), else
// the recorded out_dir.
std::filesystem::path instance_dir(const std::filesystem::path& run_dir, const StageInstance& s);

// RUN_DIR/plan.json as recorded (paths as the run wrote them); one-line errors for a path that is
// not a directory or has no plan.json.
ExperimentPlan read_run_plan(const std::filesystem::path& run_dir);

struct StageReport {
  std::string id, stage, tool, label;
  // "done", "skipped", "failed" or "blocked" from the runner's logs/<id>.json; "started" when its
  // logs/<id>.log is newer than that record (running now, or its runner died) or exists without
  // one; "missing" when it never ran, or its record says finished but its directory is gone.
  std::string status;
  std::optional<double> seconds;  // from logs/<id>.json
  std::optional<int> exit_code;   // from logs/<id>.json
  std::filesystem::path dir;      // where its outputs are (or would be)
  // manifest.json "metrics"; without a manifest, the progress in metrics.h5 (last train step as
  // "steps", last loss as "final_loss", last reward as "final_reward"), else {}.
  io::Json metrics = io::Json::object();
};

// One benchmark result of a results row: an eval-math instance.
struct ResultCell {
  std::string instance;  // the eval-math instance id
  std::string status;    // the instance's StageReport::status
  // pass@1 as a share in [0, 1] from summary.json (none when not run); or, when the evaluation
  // scored its samples with a reward (eval-math --reward), the mean reward instead.
  std::optional<double> pass1;
  std::optional<double> pass1_stderr;
  std::string reward;  // the reward spec when pass1 holds a mean reward, else ""
  // Training seeds (`seeds:`): the evaluations of one model trained with each seed share a cell;
  // pass1 is then their mean, pass1_stderr sqrt(between-seed variance / seeds + the mean of the
  // seeds' squared SEs) (the problems are the same for every seed, so their part does not shrink),
  // and seed_pass1 each seed's score in seed order. Empty for a model no seed reaches, and until
  // every seed has a score.
  std::vector<double> seed_pass1;
};

struct ResultRow {
  std::string label;  // the evaluated model's label (see collect_run_report)
  std::string bits;   // "W3G128", "W2" (per-channel), "16" (not quantized), "?" (unknown)
  std::vector<std::optional<ResultCell>> cells;  // one per ResultsTable::benchmarks entry
  // Which model the row evaluates ("stage:ID" for a stage's output, "dir:PATH" for a model from
  // outside the run) and which model that one was made from (the --model of the stage that made
  // it, in the same form; "" for a model from outside the run).
  std::string model_key, parent_key;
};

struct ResultsTable {
  std::vector<std::string> benchmarks;  // in order of first appearance in the plan
  std::vector<ResultRow> rows;          // in plan order
};

struct RunReport {
  std::string name;
  std::filesystem::path run_dir;
  std::vector<StageReport> stages;  // plan order
  ResultsTable results;
  std::vector<std::string> notes;  // things the reader should know (e.g. two results for one cell)
  std::vector<FindingResult> findings;  // the experiment's `findings:`, decided on this run
};

// Reads run_dir/plan.json and the instances' files. Results rows: one per eval-math instance,
// labelled by that instance's label when the experiment set one (label != id), else by the label of
// the instance its --model came from (else the model directory's name); instances with the same
// label and bits share a row, one column per benchmark. rqat::Error (naming the file) for a missing
// plan.json or a malformed JSON file.
RunReport collect_run_report(const std::filesystem::path& run_dir);

// The bits column for a quantization record (a manifest's config.quant or a Hugging Face
// quantization_config): "W<bits>G<group>", "W<bits>" for one group per row (group_size -1 or 0),
// "16" for null, "?" without an integer "bits".
std::string bits_label(const io::Json& quant);

// Results table: label, bits, pass@1 in percent with one decimal per benchmark, and "avg" (the mean
// of the row's benchmarks, shown only when all are present) when there is more than one benchmark.
// A benchmark the row has no finished result for shows the instance's status, or "" when the row
// has no instance for it.
std::vector<std::vector<std::string>> results_table_cells(const ResultsTable& results);
// Differences table: one line per row whose model was made from another row's model (a QAT
// student from its PTQ start, a GRPO policy from its KD student, a PTQ model from the teacher):
// model, bits, "from" (the other row's label and bits), then per benchmark this row minus that row
// in points, "+1.4 ± 2.5" with the standard error of the difference of two independent scores,
// sqrt(SE_a^2 + SE_b^2) (about 1.4 x one SE), when both rows report one. Header only when no row
// has a parent in the table.
std::vector<std::vector<std::string>> difference_table_cells(const ResultsTable& results);

// Stage table: id, tool, status, seconds, then one column per summary metric present in any stage
// (final_loss, nll, pass@1, final_reward, ...), in a fixed order.
std::vector<std::vector<std::string>> stage_table_cells(const std::vector<StageReport>& stages);

// Tables (first row: header) as GitHub markdown (columns of mostly numbers right-aligned) or CSV
// (RFC 4180 quoting).
std::string markdown_table(const std::vector<std::vector<std::string>>& cells);
std::string csv_table(const std::vector<std::vector<std::string>>& cells);

// The whole report as markdown: title, results table, stage table, notes.
std::string report_markdown(const RunReport& report);

// Writes run_dir/report.md, run_dir/report.csv (results), stages.csv, differences.csv and
// findings.csv (when the experiment declares findings) atomically.
void write_report_files(const RunReport& report);

}  // namespace rqat::experiment
