#include "experiment/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "experiment/sample_statistics.h"
#include "io/artifact.h"
#include "io/atomic_file.h"
#include "io/error.h"
#include "io/hdf5_columns.h"
#include "io/manifest.h"

namespace rqat::experiment {

namespace fs = std::filesystem;

namespace {

// eval-math's --benchmark default (apps/eval_math/main.cpp), for a stage that did not set one.
constexpr const char* kDefaultBenchmark = "math500";

// Summary metrics worth a stage-table column, in column order: the headline number of each tool.
const std::vector<std::string>& summary_metric_keys() {
  static const std::vector<std::string> keys = {
      "steps",        "final_loss",    "nll",    "teacher_nll", "math_accuracy",
      "final_reward", "eval_accuracy", "pass@1", "mean_tokens", "mean_relative_error"};
  return keys;
}

bool is_eval_math(const StageInstance& s) {
  return s.program == "eval-math" || s.tool == "eval-math";
}

// The value of `--flag` in an argument vector ("--flag VALUE" or "--flag=VALUE").
std::optional<std::string> flag_value(const std::vector<std::string>& argv,
                                      const std::string& flag) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag && i + 1 < argv.size()) return argv[i + 1];
    if (argv[i].rfind(flag + "=", 0) == 0) return argv[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

fs::path normal(const fs::path& p) {
  fs::path n = p.lexically_normal();
  // "a/b/" normalizes to "a/b/" whose filename is empty; drop the trailing separator.
  if (n.has_parent_path() && n.filename().empty()) n = n.parent_path();
  return n;
}

struct LogResult {
  std::string status;
  std::optional<double> seconds;
  std::optional<int> exit_code;
};

std::optional<LogResult> read_log_result(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  const io::Json json = io::read_json_file(path);
  if (!json.is_object() || !json.contains("status") || !json["status"].is_string())
    fail("{}: needs a string field 'status'", path.string());
  LogResult r;
  r.status = json["status"].get<std::string>();
  if (json.contains("seconds") && !json["seconds"].is_null()) {
    if (!json["seconds"].is_number()) fail("{}: field 'seconds' must be a number", path.string());
    r.seconds = json["seconds"].get<double>();
  }
  if (json.contains("exit_code") && !json["exit_code"].is_null()) {
    if (!json["exit_code"].is_number_integer())
      fail("{}: field 'exit_code' must be an integer", path.string());
    r.exit_code = json["exit_code"].get<int>();
  }
  return r;
}

bool finished(const std::string& status) { return status == "done" || status == "skipped"; }

// Whether the stage's --out is its instance path (every stage unless the experiment set `out:
// false`).
bool writes_own_dir(const StageInstance& s) {
  const auto out = flag_value(s.argv, "--out");
  return out && normal(*out) == normal(s.out_dir);
}

// How far a training stage that left no manifest (failed, stopped or still running) got: its last
// logged step and loss (or reward) from the metrics.h5 written at each checkpoint.
io::Json progress_metrics(const fs::path& path) {
  io::Json metrics = io::Json::object();
  const auto h5 = io::Hdf5Columns::read(path);
  const auto& columns = h5.columns();
  const auto steps = columns.find("train/step");
  if (steps == columns.end()) return metrics;  // not a step log (ptq's layer table)
  const auto* step_values = std::get_if<std::vector<int64_t>>(&steps->second);
  if (!step_values || step_values->empty()) return metrics;
  metrics["steps"] = step_values->back();
  for (const auto& [column, key] :
       {std::pair{"train/loss", "final_loss"}, std::pair{"train/reward", "final_reward"}}) {
    const auto found = columns.find(column);
    if (found == columns.end()) continue;
    const auto* values = std::get_if<std::vector<double>>(&found->second);
    if (!values) continue;
    for (auto v = values->rbegin(); v != values->rend(); ++v)
      if (!std::isnan(*v)) {
        metrics[key] = *v;
        break;
      }
  }
  return metrics;
}

StageReport stage_report(const fs::path& run_dir, const StageInstance& s) {
  StageReport r;
  r.id = s.id;
  r.stage = s.stage;
  r.tool = s.tool;
  r.label = s.label;
  r.dir = instance_dir(run_dir, s);
  const bool has_manifest = fs::exists(r.dir / io::kManifestFile);
  if (has_manifest) {
    const io::Json manifest = io::read_manifest(r.dir);
    if (manifest.contains("metrics") && manifest["metrics"].is_object())
      r.metrics = manifest["metrics"];
  }
  if (!has_manifest && fs::exists(r.dir / "metrics.h5"))
    r.metrics = progress_metrics(r.dir / "metrics.h5");
  const fs::path log_file = run_dir / "logs" / (s.id + ".log");
  const fs::path record_file = run_dir / "logs" / (s.id + ".json");
  if (const auto log = read_log_result(record_file)) {
    // "running": the runner's record while the stage runs (or when the runner died with it).
    r.status = log->status == "running" ? "started" : log->status;
    r.seconds = log->seconds;
    r.exit_code = log->exit_code;
    std::error_code error;
    if (fs::exists(log_file) &&
        fs::last_write_time(log_file, error) > fs::last_write_time(record_file)) {
      // The runner appends to the log when it starts a stage and writes the record when the stage
      // ends: a newer log is a run in progress (or one whose runner died), and the record is old.
      r.status = "started";
      r.seconds.reset();
      r.exit_code.reset();
    } else if (finished(r.status) && !has_manifest && writes_own_dir(s) && !fs::exists(r.dir)) {
      // Finished, but the outputs were removed since: there is nothing to report.
      r.status = "missing";
    }
  } else if (has_manifest) {
    r.status = "done";  // run by hand, or by a runner that keeps no records
  } else {
    r.status = fs::exists(log_file) ? "started" : "missing";
  }
  return r;
}

// The instance an eval-math stage evaluates (or another stage reads its model from): the input
// whose directory its --model names, or holds the file it names (a GGUF export inside a ptq or
// qat directory, re-imported by `rqat convert`).
const StageInstance* model_input(const ExperimentPlan& plan, const fs::path& run_dir,
                                 const StageInstance& eval) {
  const auto model = flag_value(eval.argv, "--model");
  if (!model) return nullptr;
  const fs::path model_path = normal(*model);
  const auto names = [&](const fs::path& path, const StageInstance& input) {
    return path == normal(input.out_dir) || path == normal(run_dir / input.id) ||
           path.filename() == input.id;
  };
  for (const auto& id : eval.inputs) {
    const StageInstance* input = plan.find(id);
    if (input && names(model_path, *input)) return input;
  }
  for (const auto& id : eval.inputs) {
    const StageInstance* input = plan.find(id);
    if (input && model_path.has_parent_path() && names(model_path.parent_path(), *input))
      return input;
  }
  return nullptr;
}

std::string row_label(const ExperimentPlan& plan, const fs::path& run_dir,
                      const StageInstance& eval) {
  if (eval.label != eval.id) return eval.label;  // set in the experiment file
  if (const StageInstance* input = model_input(plan, run_dir, eval)) return input->label;
  // A model from outside the run (the full-precision baseline): name it by its directory.
  if (const auto model = flag_value(eval.argv, "--model")) {
    const std::string name = normal(*model).filename().string();
    if (!name.empty()) return name;
  }
  return eval.id;
}

// A model directory's quantization: its manifest's config.quant (rqat artifacts), else
// config.json's quantization_config (Hugging Face checkpoints); nullopt when neither file exists.
std::optional<io::Json> model_quant(const fs::path& dir) {
  const io::Artifact model = io::Artifact::open_any(dir);
  const io::Json& manifest = model.manifest;
  if (manifest.contains("config") && manifest["config"].contains("quant"))
    return manifest["config"]["quant"];
  if (model.has(io::kConfigFile)) {
    const io::Json& config = model.config;
    return config.contains("quantization_config") ? config["quantization_config"]
                                                  : io::Json(nullptr);
  }
  return std::nullopt;
}

// The benchmark, bits and pass@1 of one eval-math instance: from its summary.json when it finished,
// else from its arguments and its model's directory (so a failed evaluation still gets its row).
struct EvalFacts {
  std::string benchmark;
  std::string bits = "?";
  ResultCell cell;
};

EvalFacts eval_facts(const ExperimentPlan& plan, const fs::path& run_dir, const StageInstance& s,
                     const StageReport& report) {
  EvalFacts facts;
  facts.cell.instance = s.id;
  facts.cell.status = report.status;
  facts.benchmark = flag_value(s.argv, "--benchmark").value_or(kDefaultBenchmark);
  const fs::path summary_path = report.dir / "summary.json";
  if (finished(report.status) && fs::exists(summary_path)) {
    const io::Json summary = io::read_json_file(summary_path);
    if (!summary.is_object()) fail("{}: expected a JSON object", summary_path.string());
    if (summary.contains("benchmark") && summary["benchmark"].is_string())
      facts.benchmark = summary["benchmark"].get<std::string>();
    facts.bits = bits_label(summary.value("quant", io::Json(nullptr)));
    const auto metrics = summary.find("metrics");
    if (metrics == summary.end() || !metrics->is_object() || !metrics->contains("pass@1") ||
        !(*metrics)["pass@1"].is_number())
      fail("{}: metrics.pass@1 must be a number", summary_path.string());
    // Study A's score: the mean reward, when the evaluation was scored with one.
    const bool rewarded = metrics->contains("mean_reward") && (*metrics)["mean_reward"].is_number();
    const std::string key = rewarded ? "mean_reward" : "pass@1";
    facts.cell.pass1 = (*metrics)[key].get<double>();
    if (metrics->contains(key + "_stderr") && (*metrics)[key + "_stderr"].is_number())
      facts.cell.pass1_stderr = (*metrics)[key + "_stderr"].get<double>();
    if (rewarded) facts.cell.reward = metrics->value("reward", std::string("a reward"));
    return facts;
  }
  // Finished without a summary.json: the outputs were tampered with; say so in the cell.
  if (finished(report.status)) facts.cell.status = "no summary.json";
  std::optional<io::Json> quant;
  if (const StageInstance* input = model_input(plan, run_dir, s))
    quant = model_quant(instance_dir(run_dir, *input));
  else if (const auto model = flag_value(s.argv, "--model"))
    quant = model_quant(*model);
  if (quant) facts.bits = bits_label(*quant);
  return facts;
}

// The model an eval-math instance evaluates, and the model that one was made from (ResultRow).
std::string model_key(const ExperimentPlan& plan, const fs::path& run_dir, const StageInstance& s) {
  if (const StageInstance* input = model_input(plan, run_dir, s)) return "stage:" + input->id;
  if (const auto model = flag_value(s.argv, "--model")) return "dir:" + normal(*model).string();
  return "";
}

std::string parent_key(const ExperimentPlan& plan, const fs::path& run_dir,
                       const StageInstance& eval) {
  const StageInstance* made_by = model_input(plan, run_dir, eval);
  return made_by ? model_key(plan, run_dir, *made_by) : "";
}

// The row an evaluation belongs in: same label and bits, where an unknown bits ("?": the model was
// never made) matches any, so a blocked evaluation still lands in its model's row.
ResultRow* find_row(ResultsTable& table, const std::string& label, const std::string& bits) {
  for (auto& row : table.rows)
    if (row.label == label && (row.bits == bits || row.bits == "?" || bits == "?")) return &row;
  return nullptr;
}

// The cell of a model evaluated once per training seed (ResultCell::seed_pass1): the seeds' mean
// and its SE; until every seed has a score, the status of the first that has none.
ResultCell combine_seeds(const std::vector<ResultCell>& seeds) {
  ResultCell cell = seeds.front();
  std::vector<double> scores, squared_errors;
  for (const auto& seed : seeds) {
    if (!seed.pass1) {
      cell.status = seed.status;
      cell.pass1.reset();
      cell.pass1_stderr.reset();
      return cell;
    }
    scores.push_back(*seed.pass1);
    if (seed.pass1_stderr) squared_errors.push_back(*seed.pass1_stderr * *seed.pass1_stderr);
  }
  const double between = scores.size() > 1 ? sample_variance(scores) : 0.0;
  const double within = squared_errors.empty() ? 0.0 : mean_of(squared_errors);
  cell.pass1 = mean_of(scores);
  cell.pass1_stderr = std::sqrt(between / static_cast<double>(scores.size()) + within);
  cell.seed_pass1 = std::move(scores);
  return cell;
}

ResultsTable results_table(const ExperimentPlan& plan, const fs::path& run_dir,
                           const std::vector<StageReport>& stages,
                           std::vector<std::string>& notes) {
  ResultsTable table;
  // (row, column) -> each seed's cell of a model trained with several seeds, combined at the end.
  std::map<std::pair<std::size_t, std::size_t>, std::vector<ResultCell>> seed_cells;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const StageInstance& s = plan.stages[i];
    if (!is_eval_math(s)) continue;
    const EvalFacts facts = eval_facts(plan, run_dir, s, stages[i]);
    const auto column =
        std::find(table.benchmarks.begin(), table.benchmarks.end(), facts.benchmark);
    const auto col = static_cast<std::size_t>(column - table.benchmarks.begin());
    if (column == table.benchmarks.end()) {
      table.benchmarks.push_back(facts.benchmark);
      for (auto& row : table.rows) row.cells.emplace_back();
    }
    std::string label = row_label(plan, run_dir, s);
    ResultRow* row = find_row(table, label, facts.bits);
    const bool seeded = !point_value(s, plan.seed_variable).empty();
    const auto at = [&](const ResultRow* r) {
      return std::pair{static_cast<std::size_t>(r - table.rows.data()), col};
    };
    if (row && seeded) {
      const auto seeds = seed_cells.find(at(row));
      if (seeds != seed_cells.end()) {
        seeds->second.push_back(facts.cell);  // another seed of the same model
        continue;
      }
    }
    if (row && row->cells[col]) {
      // Two evaluations of one model on one benchmark: keep both, the second told apart by its id.
      notes.push_back(fmt::format("{} and {} both evaluate '{}' on {}; the second has its own row",
                                  row->cells[col]->instance, s.id, label, facts.benchmark));
      label = fmt::format("{} ({})", label, s.id);
      row = find_row(table, label, facts.bits);
    }
    if (!row) {
      table.rows.push_back(
          {label, facts.bits, {}, model_key(plan, run_dir, s), parent_key(plan, run_dir, s)});
      row = &table.rows.back();
      row->cells.resize(table.benchmarks.size());
    }
    if (row->bits == "?") row->bits = facts.bits;
    row->cells[col] = facts.cell;
    if (seeded) seed_cells[at(row)] = {facts.cell};
  }
  for (const auto& [at, seeds] : seed_cells)
    table.rows[at.first].cells[at.second] = combine_seeds(seeds);
  std::set<std::string> rewards;
  bool plain = false;
  for (const auto& row : table.rows)
    for (const auto& cell : row.cells)
      if (cell && cell->pass1) {
        if (cell->reward.empty())
          plain = true;
        else
          rewards.insert(cell->reward);
      }
  for (const auto& reward : rewards)
    notes.push_back(
        fmt::format("results scored with reward {} show the mean reward x 100 (its pass@1 is in "
                    "summary.json){}",
                    reward, plain ? "; the other cells are pass@1" : ""));
  return table;
}

std::string percent(double share) { return fmt::format("{:.1f}", 100.0 * share); }

std::string format_metric(const io::Json& value) {
  if (value.is_number_integer()) return fmt::format("{}", value.get<int64_t>());
  return fmt::format("{:.4g}", value.get<double>());
}

bool looks_numeric(const std::string& text) {
  if (text.empty()) return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

void append_markdown_row(std::string& text, const std::vector<std::string>& row) {
  text += '|';
  for (const auto& cell : row) {
    text += ' ';
    text += markdown_cell(cell);
    text += " |";
  }
  text += '\n';
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string status_counts(const std::vector<StageReport>& stages) {
  std::vector<std::pair<std::string, int>> counts;  // in order of first appearance
  for (const auto& s : stages) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == s.status; });
    if (it == counts.end())
      counts.emplace_back(s.status, 1);
    else
      ++it->second;
  }
  std::string text = fmt::format("{} stage instances", stages.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    text += fmt::format("{} {} {}", i == 0 ? ":" : ",", counts[i].second, counts[i].first);
  return text;
}

}  // namespace

std::string bits_label(const io::Json& quant) {
  if (quant.is_null()) return "16";
  if (!quant.is_object() || !quant.contains("bits") || !quant["bits"].is_number_integer())
    return "?";
  // llama.cpp's grids by their type (gguf-q2_k: Q2_K), which says more than bits and sub-blocks.
  if (quant.contains("grid") && quant["grid"].is_string()) {
    std::string type = quant["grid"].get<std::string>();
    if (type.rfind("gguf-", 0) == 0) type = type.substr(5);
    for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return type;
  }
  const int64_t bits = quant["bits"].get<int64_t>();
  int64_t group = -1;
  if (quant.contains("group_size") && quant["group_size"].is_number_integer())
    group = quant["group_size"].get<int64_t>();
  // group_size -1 (rqat, GPTQ) or 0 means one group per output row: no "G" suffix.
  return group > 0 ? fmt::format("W{}G{}", bits, group) : fmt::format("W{}", bits);
}

fs::path instance_dir(const fs::path& run_dir, const StageInstance& s) {
  const fs::path in_run = run_dir / s.id;
  if (fs::exists(in_run) || s.out_dir.empty() || !fs::exists(s.out_dir)) return in_run;
  return s.out_dir;
}

ExperimentPlan read_run_plan(const fs::path& run_dir) {
  if (!fs::is_directory(run_dir))
    fail("{}: not a directory (give a run directory)", run_dir.string());
  const fs::path plan_file = run_dir / "plan.json";
  if (!fs::is_regular_file(plan_file))
    fail("{}: no plan.json (a run directory of `rqat run` or `rqat sbatch`)", plan_file.string());
  return read_plan(plan_file);
}

RunReport collect_run_report(const fs::path& run_dir) {
  const ExperimentPlan plan = read_run_plan(run_dir);
  RunReport report;
  report.name = plan.name;
  report.run_dir = run_dir;
  for (const auto& s : plan.stages) report.stages.push_back(stage_report(run_dir, s));
  report.results = results_table(plan, run_dir, report.stages, report.notes);
  report.findings = evaluate_findings(plan, run_dir);
  return report;
}

std::vector<std::vector<std::string>> results_table_cells(const ResultsTable& results) {
  const bool with_avg = results.benchmarks.size() > 1;
  std::vector<std::string> header = {"model", "bits"};
  header.insert(header.end(), results.benchmarks.begin(), results.benchmarks.end());
  if (with_avg) header.push_back("avg");
  std::vector<std::vector<std::string>> cells = {header};
  for (const auto& row : results.rows) {
    std::vector<std::string> line = {row.label, row.bits};
    double sum = 0;
    bool complete = true;
    for (const auto& cell : row.cells) {
      if (cell && cell->pass1) {
        // Seeds: the mean, then each seed's score.
        std::vector<std::string> seeds;
        for (const double v : cell->seed_pass1) seeds.push_back(percent(v));
        line.push_back(seeds.size() > 1
                           ? fmt::format("{} ({})", percent(*cell->pass1), fmt::join(seeds, " "))
                           : percent(*cell->pass1));
        sum += *cell->pass1;
      } else {
        line.push_back(cell ? cell->status : "");
        complete = false;
      }
    }
    // An average over some benchmarks only would not be comparable with the other rows'.
    if (with_avg)
      line.push_back(complete ? percent(sum / static_cast<double>(row.cells.size())) : "");
    cells.push_back(std::move(line));
  }
  return cells;
}

std::vector<std::vector<std::string>> difference_table_cells(const ResultsTable& results) {
  std::vector<std::string> header = {"model", "bits", "from"};
  header.insert(header.end(), results.benchmarks.begin(), results.benchmarks.end());
  std::vector<std::vector<std::string>> cells = {header};
  for (const auto& row : results.rows) {
    if (row.parent_key.empty()) continue;
    const auto parent = std::find_if(results.rows.begin(), results.rows.end(),
                                     [&](const auto& r) { return r.model_key == row.parent_key; });
    if (parent == results.rows.end()) continue;
    std::vector<std::string> line = {row.label, row.bits,
                                     fmt::format("{} ({})", parent->label, parent->bits)};
    for (std::size_t c = 0; c < row.cells.size(); ++c) {
      const auto& a = row.cells[c];
      const auto& b = parent->cells[c];
      if (!a || !b || !a->pass1 || !b->pass1) {
        line.emplace_back();
        continue;
      }
      std::string text = fmt::format("{:+.1f}", 100.0 * (*a->pass1 - *b->pass1));
      if (a->pass1_stderr && b->pass1_stderr)
        text += fmt::format(" ± {:.1f}", 100.0 * std::hypot(*a->pass1_stderr, *b->pass1_stderr));
      line.push_back(std::move(text));
    }
    cells.push_back(std::move(line));
  }
  return cells;
}

std::vector<std::vector<std::string>> stage_table_cells(const std::vector<StageReport>& stages) {
  std::vector<std::string> keys;
  for (const auto& key : summary_metric_keys())
    for (const auto& s : stages)
      if (s.metrics.contains(key) && s.metrics[key].is_number()) {
        keys.push_back(key);
        break;
      }
  std::vector<std::string> header = {"id", "tool", "status", "seconds"};
  header.insert(header.end(), keys.begin(), keys.end());
  std::vector<std::vector<std::string>> cells = {header};
  for (const auto& s : stages) {
    std::vector<std::string> line = {s.id, s.tool, s.status,
                                     s.seconds ? fmt::format("{:.1f}", *s.seconds) : ""};
    if (s.status == "failed" && s.exit_code) line[2] = fmt::format("failed ({})", *s.exit_code);
    for (const auto& key : keys)
      line.push_back(s.metrics.contains(key) && s.metrics[key].is_number()
                         ? format_metric(s.metrics[key])
                         : "");
    cells.push_back(std::move(line));
  }
  return cells;
}

std::string markdown_table(const std::vector<std::vector<std::string>>& cells) {
  if (cells.empty()) return "";
  const std::size_t columns = cells.front().size();
  std::string text;
  append_markdown_row(text, cells.front());
  text += "|";
  for (std::size_t c = 0; c < columns; ++c) {
    // Right-align columns of mostly numbers (a benchmark column may hold a status word or two).
    std::size_t filled = 0, numbers = 0;
    for (std::size_t r = 1; r < cells.size(); ++r) {
      if (cells[r][c].empty()) continue;
      ++filled;
      numbers += looks_numeric(cells[r][c]) ? 1 : 0;
    }
    text += numbers > 0 && 2 * numbers >= filled ? "---:|" : "---|";
  }
  text += "\n";
  for (std::size_t r = 1; r < cells.size(); ++r) append_markdown_row(text, cells[r]);
  return text;
}

std::string csv_table(const std::vector<std::vector<std::string>>& cells) {
  std::string text;
  for (const auto& row : cells) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c > 0) text += ',';
      text += csv_cell(row[c]);
    }
    text += "\n";
  }
  return text;
}

std::string report_markdown(const RunReport& report) {
  std::string text = fmt::format("# Run {}\n\n`{}`: {}\n\n## Results (pass@1, %)\n\n", report.name,
                                 report.run_dir.string(), status_counts(report.stages));
  if (report.results.rows.empty())
    text += "No eval-math stages in this run.\n";
  else
    text += markdown_table(results_table_cells(report.results));
  const auto differences = difference_table_cells(report.results);
  if (differences.size() > 1) {
    text += "\n## Differences\n\n";
    text += markdown_table(differences);
    text +=
        "\nEach cell: this row minus the row of the model it was made from, in points, ± the "
        "standard error of the difference of two independent scores, sqrt(SE_a² + SE_b²), about "
        "1.4 x one score's. A difference under two of them is within noise.\n";
  }
  if (!report.findings.empty()) {
    text += "\n## Findings\n\n";
    text += markdown_table(findings_table_cells(report.findings));
    text +=
        "\nEach finding: the arm the paper says scores higher minus the other, in points, paired "
        "problem by problem (instances matched on their other sweep values, training seeds "
        "included), ± its standard error. SE over seeds+problems: the mean over training seeds "
        "(per seed: each seed's difference) with the between-seed and the problem variance "
        "(docs/experiments.md, \"Training seeds\"); problems, 1 seed: one training run per arm, "
        "the SE covers the problems only, not training noise; problems: no arm depends on a "
        "training seed. shown: at "
        "least 2 SE in the paper's direction; refuted: at least 2 SE against it; undecided: "
        "neither. The last columns: problems at which a 3-point difference would be 2 SE, and at "
        "which the difference measured here would be (undecided findings), at the spread this run "
        "measured (more seeds: the seeds' spread alone is too large for any number of "
        "problems).\n";
  }
  text += "\n## Stages\n\n";
  text += markdown_table(stage_table_cells(report.stages));
  if (!report.notes.empty()) {
    text += "\nNotes:\n";
    for (const auto& note : report.notes) text += fmt::format("- {}\n", note);
  }
  return text;
}

void write_report_files(const RunReport& report) {
  io::write_text_atomically(report.run_dir / "report.md", report_markdown(report));
  io::write_text_atomically(report.run_dir / "report.csv",
                            csv_table(results_table_cells(report.results)));
  io::write_text_atomically(report.run_dir / "stages.csv",
                            csv_table(stage_table_cells(report.stages)));
  io::write_text_atomically(report.run_dir / "differences.csv",
                            csv_table(difference_table_cells(report.results)));
  if (!report.findings.empty())
    io::write_text_atomically(report.run_dir / "findings.csv",
                              csv_table(findings_table_cells(report.findings)));
}

}  // namespace rqat::experiment
