#include "tools/eval_run/eval_tensorboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <variant>

namespace rqat::eval {

namespace {

// Completions shown in the text tab: enough to read what the model does, not the whole run.
constexpr size_t kShownSamples = 4;
constexpr size_t kShownCharacters = 2000;

void add_numbers(io::TensorBoardWriter& writer, const std::string& prefix, const io::Json& json,
                 int64_t step) {
  for (const auto& [key, value] : json.items()) {
    if (value.is_object())
      add_numbers(writer, prefix + key + "/", value, step);
    else if (value.is_number())
      writer.add_scalar(prefix + key, value.get<double>(), step);
  }
}

std::string shown_samples(const EvalRecords& records) {
  std::string text;
  const auto& results = *records.results;
  for (size_t i = 0; i < std::min(kShownSamples, results.size()); ++i) {
    const auto& r = results[i];
    const auto& grade = (*records.grades)[i];
    const auto& problem = (*records.problems)[r.request_index];
    std::string completion = r.text.substr(0, kShownCharacters);
    if (r.text.size() > kShownCharacters) completion += " [...]";
    text += fmt::format("**{} sample {}**: gold `{}`, extracted `{}`, {}", problem.id,
                        r.sample_index, problem.gold, grade.prediction_answer,
                        grade.kind == GradeKind::equal ? "correct" : "wrong");
    if (records.rewards) text += fmt::format(", reward {:.3f}", (*records.rewards)[i]);
    text += "\n\n```\n" + completion + "\n```\n\n";
  }
  return text;
}

}  // namespace

EvalTensorBoard::EvalTensorBoard(const std::filesystem::path& dir, const io::Json& settings)
    : writer_(dir) {
  writer_.add_text("settings", "```\n" + settings.dump(2) + "\n```", 0);
  writer_.flush();
}

void EvalTensorBoard::sample_finished(int64_t samples_done, int64_t tokens, bool truncated,
                                      double tokens_per_second) {
  tokens_ += tokens;
  truncated_ += truncated ? 1 : 0;
  // Means over the samples this process finished (not those a resumed run kept).
  writer_.add_scalar("generation/tokens_per_second", tokens_per_second, samples_done);
  writer_.add_scalar("generation/mean_tokens", static_cast<double>(tokens_) / ++finished_,
                     samples_done);
  writer_.add_scalar("generation/truncated_share", static_cast<double>(truncated_) / finished_,
                     samples_done);
}

void EvalTensorBoard::finish(const io::Hdf5Columns& results, const EvalSummary& summary,
                             const EvalRecords& records) {
  for (const auto& [name, column] : results.columns()) {
    std::visit(
        [&](const auto& values) {
          using Value = typename std::decay_t<decltype(values)>::value_type;
          if constexpr (!std::is_same_v<Value, std::string>)
            for (size_t row = 0; row < values.size(); ++row)
              writer_.add_scalar(name, static_cast<double>(values[row]), static_cast<int64_t>(row));
        },
        column);
  }
  const auto samples = static_cast<int64_t>(records.results->size());
  add_numbers(writer_, "summary/", metrics_json(summary.overall), samples);
  writer_.add_text("samples", shown_samples(records), samples);
  writer_.close();
}

}  // namespace rqat::eval
