#include "eval/regrade.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "eval/benchmark.h"
#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_file.h"
#include "io/jsonl.h"

namespace rqat::eval {

namespace {

// The per-line facts the metrics need besides the grade; see RegradeSummary::metrics.
GradedSample sample_facts(const io::Json& row, std::size_t line) {
  GradedSample sample;
  auto text = [&](const char* field) -> std::optional<std::string> {
    auto it = row.find(field);
    if (it == row.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    return it->dump();
  };
  sample.problem_id = text("id").value_or("line " + std::to_string(line));
  if (auto subject = text("subject")) sample.tags["subject"] = *subject;
  if (auto level = text("level")) sample.tags["level"] = *level;
  if (auto tokens = row.find("tokens"); tokens != row.end() && tokens->is_number_integer())
    sample.tokens = tokens->get<int64_t>();
  sample.truncated = text("finish_reason").value_or("") == "length";
  return sample;
}

}  // namespace

RegradeSummary regrade_file(const std::filesystem::path& input, const std::filesystem::path& output,
                            const GradeOptions& options, unsigned threads,
                            const std::vector<int>& ks) {
  const std::string file = input.string();
  std::vector<io::Json> rows;
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<GradedSample> samples;
  // Ordered JSON: the rows are written back with their keys in the input's order.
  io::for_each_jsonl_object<io::Json>(input, [&](io::Json& row, std::size_t number) {
    auto completion = row.find("completion");
    if (completion == row.end())
      fail("{}:{}: missing field 'completion' on line {}", file, number, number);
    if (!completion->is_string())
      fail("{}:{}: field 'completion' on line {} is not a string", file, number, number);
    auto gold = row.find("gold");
    if (gold == row.end() || gold->is_null())
      fail("{}:{}: missing field 'gold' on line {}", file, number, number);
    auto gold_text = json_answer_text(nlohmann::json(*gold));
    if (!gold_text)
      fail("{}:{}: field 'gold' on line {} is not a string, number or list of strings", file,
           number, number);
    if (gold_text->find_first_not_of(" \t\r\n") == std::string::npos)
      fail("{}:{}: empty gold on line {}", file, number, number);
    pairs.emplace_back(completion->get<std::string>(), std::move(*gold_text));
    samples.push_back(sample_facts(row, number));
    rows.push_back(std::move(row));
  });

  const auto results = grade_batch(pairs, threads, options);
  RegradeSummary summary;
  summary.count = results.size();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const GradeResult& result = results[i];
    io::Json& row = rows[i];
    if (result.prediction_answer.empty()) {
      row["extracted"] = nullptr;
    } else {
      row["extracted"] = result.prediction_answer;
    }
    row["correct"] = result.kind == GradeKind::equal;
    summary.correct += result.kind == GradeKind::equal ? 1 : 0;
    summary.unparseable += result.kind == GradeKind::unparseable ? 1 : 0;
    summary.timeouts += result.kind == GradeKind::timeout ? 1 : 0;
    samples[i].kind = result.kind;
    samples[i].extracted = result.prediction_answer;
  }
  if (!samples.empty()) summary.metrics = summarize_samples(samples, ks);
  if (summary.count > 0)
    summary.accuracy = static_cast<double>(summary.correct) / static_cast<double>(summary.count);

  io::write_file_atomically(output, [&](std::ostream& out) {
    for (const auto& row : rows)
      out << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  });
  return summary;
}

std::filesystem::path default_regrade_output(const std::filesystem::path& input) {
  std::filesystem::path out = input;
  out.replace_filename(input.stem().string() + ".graded" + input.extension().string());
  return out;
}

std::string format_regrade_summary(const RegradeSummary& s) {
  std::string text;
  text += fmt::format("{:<12} {:>8}\n", "count", s.count);
  text += fmt::format("{:<12} {:>8}\n", "correct", s.correct);
  text += fmt::format("{:<12} {:>8}\n", "unparseable", s.unparseable);
  text += fmt::format("{:<12} {:>8}\n", "timeouts", s.timeouts);
  text += fmt::format("{:<12} {:>7.2f}%\n", "accuracy", 100.0 * s.accuracy);
  if (s.count > 0) text += fmt::format("\n{}", format_summary_table(s.metrics, "regraded"));
  return text;
}

}  // namespace rqat::eval
