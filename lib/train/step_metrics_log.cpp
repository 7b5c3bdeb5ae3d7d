#include "train/step_metrics_log.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_text.h"
#include "io/hdf5_columns.h"

namespace rqat::train {

StepMetricsLog::StepMetricsLog(std::filesystem::path dir, bool writer)
    : dir_(std::move(dir)), writer_(writer) {}

void StepMetricsLog::start_fresh() {
  rows_.clear();
  if (writer_) std::filesystem::remove(jsonl_path());
}

void StepMetricsLog::resume_at(int64_t step) {
  rows_.clear();
  if (!std::filesystem::exists(jsonl_path())) return;
  // Read by hand rather than with io::for_each_jsonl_object: a run killed while appending leaves a
  // partial last line, which is dropped (its step is after the checkpoint anyway).
  std::ifstream in(jsonl_path(), std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    io::Json line;
    if (auto problem = io::parse_json_into(lines[i], line)) {
      if (i + 1 == lines.size()) break;
      fail("{}:{}: {}", jsonl_path().string(), i + 1, *problem);
    }
    if (!line.is_object() || !line.contains("series") || !line["series"].is_string() ||
        !line.contains("step") || !line["step"].is_number_integer())
      fail("{}: row {} needs a string 'series' and an integer 'step'", jsonl_path().string(),
           i + 1);
    if (line["step"].get<int64_t>() > step) continue;
    const std::string series = line["series"].get<std::string>();
    line.erase("series");
    rows_.emplace_back(series, std::move(line));
  }
  if (!writer_) return;
  io::write_file_atomically(jsonl_path(), [&](std::ostream& out) {
    for (const auto& [series, row] : rows_) {
      io::Json line = {{"series", series}};
      line.update(row);
      out << line.dump() << '\n';
    }
  });
}

void StepMetricsLog::write_tensorboard(const std::filesystem::path& dir) {
  if (!writer_) return;
  // Flushed after each row and text (below), not on a timer: a row every logged step is a few
  // hundred bytes, and TensorBoard then shows every step as soon as it is logged.
  tensorboard_ = std::make_unique<io::TensorBoardWriter>(
      dir, io::TensorBoardWriterOptions{.flush_seconds = std::numeric_limits<double>::infinity()});
}

void StepMetricsLog::add_text(const std::string& tag, const std::string& markdown, int64_t step) {
  if (!tensorboard_) return;
  tensorboard_->add_text(tag, markdown, step);
  tensorboard_->flush();
}

void StepMetricsLog::append(const std::string& series, io::Json row) {
  if (!row.contains("step")) fail("metrics row without a step");
  if (tensorboard_) {
    const int64_t step = row["step"].get<int64_t>();
    for (const auto& [key, value] : row.items())
      if (key != "step" && value.is_number())
        tensorboard_->add_scalar(series + "/" + key, value.get<double>(), step);
    tensorboard_->flush();
  }
  if (writer_) {
    std::filesystem::create_directories(dir_);
    std::ofstream out(jsonl_path(), std::ios::app);
    io::Json line = {{"series", series}};
    line.update(row);
    out << line.dump() << '\n';
    out.flush();
    if (!out) fail("cannot append to {}", jsonl_path().string());
  }
  rows_.emplace_back(series, std::move(row));
}

void StepMetricsLog::write_hdf5(const std::map<std::string, std::string>& attributes) const {
  if (!writer_) return;
  std::map<std::string, std::vector<const io::Json*>> by_series;
  for (const auto& [series, row] : rows_) by_series[series].push_back(&row);
  io::Hdf5Columns h5;
  for (const auto& [key, value] : attributes) h5.set_attribute(key, value);
  for (const auto& [series, rows] : by_series) {
    std::set<std::string> numeric_keys;
    for (const auto* row : rows)
      for (const auto& [key, value] : row->items())
        if (value.is_number() && key != "step") numeric_keys.insert(key);
    std::vector<int64_t> steps;
    for (const auto* row : rows) steps.push_back((*row)["step"].get<int64_t>());
    h5.add(series + "/step", steps);
    for (const auto& key : numeric_keys) {
      std::vector<double> values;
      values.reserve(rows.size());
      for (const auto* row : rows) {
        const auto it = row->find(key);
        values.push_back(it != row->end() && it->is_number()
                             ? it->get<double>()
                             : std::numeric_limits<double>::quiet_NaN());
      }
      h5.add(series + "/" + key, values);
    }
  }
  h5.write(hdf5_path());
}

}  // namespace rqat::train
