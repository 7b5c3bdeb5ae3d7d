#include "data/teacher_traces.h"

#include <fmt/format.h>

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "io/atomic_file.h"
#include "io/error.h"
#include "io/json_file.h"
#include "io/jsonl.h"

namespace rqat::data {

namespace {

// The fields of one samples.jsonl line; errors are "FILE:LINE: ..." naming the field.
class SampleLine {
 public:
  SampleLine(const io::Json& row, const std::string& file, size_t line)
      : row_(row), file_(file), line_(line) {}

  const io::Json& field(const char* name, const char* why) const {
    auto it = row_.find(name);
    if (it == row_.end() || it->is_null())
      fail("{}:{}: field '{}' is missing ({})", file_, line_, name, why);
    return *it;
  }
  std::string text(const char* name, const char* why) const {
    const auto& value = field(name, why);
    if (!value.is_string())
      fail("{}:{}: field '{}' must be a string, got {}", file_, line_, name, value.type_name());
    return value.get<std::string>();
  }
  // Ids may be numbers in hand-made files; they are compared as their JSON text.
  std::string id() const {
    const auto& value = field("id", "the problem id");
    return value.is_string() ? value.get<std::string>() : value.dump();
  }
  bool flag(const char* name, const char* why) const {
    const auto& value = field(name, why);
    if (!value.is_boolean())
      fail("{}:{}: field '{}' must be true or false, got {}", file_, line_, name, value.dump());
    return value.get<bool>();
  }
  int64_t count(const char* name, const char* why) const {
    const auto& value = field(name, why);
    if (!value.is_number_integer())
      fail("{}:{}: field '{}' must be an integer, got {}", file_, line_, name, value.dump());
    return value.get<int64_t>();
  }
  std::string optional_text(const char* name) const {
    auto it = row_.find(name);
    if (it == row_.end() || it->is_null()) return "";
    if (!it->is_string())
      fail("{}:{}: field '{}' must be a string, got {}", file_, line_, name, it->type_name());
    return it->get<std::string>();
  }

 private:
  const io::Json& row_;
  const std::string& file_;
  size_t line_;
};

// What is remembered of a problem while reading: its kept traces (count and texts for dedupe).
struct ProblemState {
  int64_t kept = 0;
  std::unordered_set<std::string> completions;
};

}  // namespace

TraceSummary write_teacher_traces(const TraceOptions& options) {
  if (options.inputs.empty()) fail("rqat traces: give at least one samples.jsonl file");
  if (options.out.empty()) fail("--out is required");
  if (options.max_per_problem && *options.max_per_problem < 1)
    fail("--max-per-problem must be >= 1, got {}", *options.max_per_problem);
  if (options.min_tokens < 0) fail("--min-tokens must be >= 0, got {}", options.min_tokens);
  // Every input is checked before any is read, so a typo in the last file does not cost a pass
  // over the first ones.
  for (const auto& input : options.inputs)
    if (!std::filesystem::is_regular_file(input)) fail("{}: file not found", input.string());

  TraceSummary summary;
  summary.files = static_cast<int64_t>(options.inputs.size());
  std::unordered_map<std::string, ProblemState> problems;
  std::set<std::string> systems;
  if (options.out.has_parent_path()) std::filesystem::create_directories(options.out.parent_path());
  io::write_file_atomically(options.out, [&](std::ostream& out) {
    for (const auto& input : options.inputs) {
      const std::string file = input.string();
      io::for_each_jsonl_object<io::Json>(input, [&](const io::Json& row, size_t number) {
        const SampleLine sample(row, file, number);
        summary.samples_read += 1;
        const std::string id = sample.id();
        const std::string user = sample.text(
            "user", "the user turn; samples.jsonl files older than this field need a new run");
        const std::string completion = sample.text("completion", "the generated text");
        const io::Json& gold = sample.field("gold", "the reference answer");
        const std::string system = sample.optional_text("system");
        // Id and user turn name the problem; the id's length prefix keeps the key unambiguous.
        auto& problem = problems[fmt::format("{}:{}\n{}", id.size(), id, user)];

        if (!options.include_incorrect && !sample.flag("correct", "the grade; or pass --all")) {
          summary.incorrect += 1;
          return;
        }
        if (options.drop_truncated &&
            sample.text("finish_reason", "needed by --drop-truncated") == "length") {
          summary.truncated += 1;
          return;
        }
        if (options.min_tokens > 0 &&
            sample.count("tokens", "needed by --min-tokens") < options.min_tokens) {
          summary.too_short += 1;
          return;
        }
        if (options.dedupe && problem.completions.count(completion) > 0) {
          summary.duplicates += 1;
          return;
        }
        if (options.max_per_problem && problem.kept >= *options.max_per_problem) {
          summary.over_limit += 1;
          return;
        }
        if (options.dedupe) problem.completions.insert(completion);
        if (problem.kept == 0) summary.problems_with_trace += 1;
        problem.kept += 1;
        summary.kept += 1;
        systems.insert(system);

        const io::Json trace = {
            {"id", id},         {"prompt", user}, {"response", completion},
            {"system", system}, {"gold", gold},   {"source", fmt::format("{}:{}", file, number)}};
        out << trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      });
    }
  });
  summary.problems = static_cast<int64_t>(problems.size());
  summary.system_prompts = static_cast<int64_t>(systems.size());
  summary.any_system_prompt =
      systems.size() > 1 || (systems.size() == 1 && !systems.begin()->empty());
  return summary;
}

std::string format_trace_summary(const TraceSummary& s, const TraceOptions& options) {
  std::string line = fmt::format(
      "traces: {} samples of {} problems from {} file{}; kept {} (dropped {} incorrect, {} "
      "truncated, {} short, {} duplicate, {} over --max-per-problem); {} problems with a trace",
      s.samples_read, s.problems, s.files, s.files == 1 ? "" : "s", s.kept, s.incorrect,
      s.truncated, s.too_short, s.duplicates, s.over_limit, s.problems_with_trace);
  // The data loader applies one --system to every document: say so when the traces need one.
  if (s.system_prompts > 1) {
    line +=
        fmt::format("; {} different system prompts (training applies one --system-prompt to all)",
                    s.system_prompts);
  } else if (s.any_system_prompt) {
    line += "; traces have a system prompt (train with the same --system-prompt)";
  }
  line += fmt::format("; wrote {}", options.out.string());
  return line;
}

}  // namespace rqat::data
