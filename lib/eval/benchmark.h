// Math benchmarks of eval-math: which JSONL fields hold the problem, the gold answer, the id and
// the subject / level, with built-in specs for the data in shared/data/<name>/test.jsonl, and a
// loader whose errors name the file and line.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rqat::eval {

struct BenchmarkSpec {
  std::string name;
  std::vector<std::string> problem_fields;  // the first one present (and non-null) is the problem
  std::string answer_field;                 // gold; empty: none (use solution_field)
  std::string solution_field;  // fallback gold: last \boxed{} of it, when answer_field is absent
  bool gsm8k_gold = false;     // answer_field holds a GSM8K solution: gold is what follows ####
  std::string id_field;        // empty: the 0-based record index
  std::string subject_field;   // empty: none
  std::string level_field;     // empty: none
};

// One problem of a benchmark; gold is never empty.
struct BenchmarkProblem {
  std::string id;
  std::string problem;
  std::string gold;
  std::string subject;
  std::string level;
  std::size_t line = 0;  // 1-based line in the file
};

// --problem-field / --answer-field / ... of the CLI: a set field replaces the spec's.
struct FieldOverrides {
  std::optional<std::string> problem, answer, solution, id, subject, level;
};

// math500, gsm8k, aime24, aime25, amc23, minerva_math, olympiadbench.
const std::vector<BenchmarkSpec>& builtin_benchmarks();
// The built-in spec of that name; rqat::Error listing the known names otherwise.
const BenchmarkSpec& builtin_benchmark(std::string_view name);
BenchmarkSpec apply_overrides(BenchmarkSpec spec, const FieldOverrides& overrides);

// The spec of --benchmark NAME with the --*-field overrides: a built-in one, or, for another name
// with a --data file, a generic spec (fields `problem` and `answer` unless overridden).
BenchmarkSpec resolve_benchmark(const std::string& name, bool have_data_file,
                                const FieldOverrides& overrides);

// The data file: `data` when given, else <data_dir>/<name>/test.jsonl with data_dir from the
// argument or $RQAT_DATA_DIR; rqat::Error saying which flag to give when neither is set.
std::filesystem::path resolve_benchmark_data(const std::string& data, const std::string& data_dir,
                                             const std::string& name);

// A JSON answer value as text: strings as they are, integers and integral floats (AMC23's 27.0)
// as integers, other numbers as JSON, a list of strings joined with ", " (OlympiadBench's
// final_answer). nullopt for null or other shapes.
std::optional<std::string> json_answer_text(const nlohmann::json& value);

// Reads a JSONL file (blank lines skipped). Errors name the file and line: missing file, invalid
// JSON, a line that is not an object, a missing field, an empty answer.
std::vector<BenchmarkProblem> load_benchmark(const std::filesystem::path& path,
                                             const BenchmarkSpec& spec);

}  // namespace rqat::eval
