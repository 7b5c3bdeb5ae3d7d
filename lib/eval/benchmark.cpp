#include "eval/benchmark.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "eval/answer_extraction.h"
#include "io/error.h"
#include "io/jsonl.h"

namespace rqat::eval {

namespace {

BenchmarkSpec make(std::string name, std::vector<std::string> problem_fields, std::string answer,
                   std::string solution = "", std::string id = "", std::string subject = "",
                   std::string level = "") {
  BenchmarkSpec spec;
  spec.name = std::move(name);
  spec.problem_fields = std::move(problem_fields);
  spec.answer_field = std::move(answer);
  spec.solution_field = std::move(solution);
  spec.id_field = std::move(id);
  spec.subject_field = std::move(subject);
  spec.level_field = std::move(level);
  return spec;
}

std::vector<BenchmarkSpec> make_builtins() {
  std::vector<BenchmarkSpec> specs;
  specs.push_back(make("math500", {"problem"}, "answer", "solution", "", "subject", "level"));
  BenchmarkSpec gsm8k = make("gsm8k", {"question"}, "answer");
  gsm8k.gsm8k_gold = true;
  specs.push_back(gsm8k);
  specs.push_back(make("aime24", {"problem"}, "answer", "", "id"));
  specs.push_back(make("aime25", {"problem"}, "answer"));
  // AMC23 has both `question` and `problem` (equal); its answers are floats such as 27.0.
  specs.push_back(make("amc23", {"question", "problem"}, "answer", "", "id"));
  specs.push_back(make("minerva_math", {"problem"}, "", "solution", "idx", "type"));
  // OlympiadBench: `final_answer` is a one-element list (["$(1,8,19), (2,7,13)$"] for the
  // multiple-answer problems too); `solution` is a list of worked solutions.
  specs.push_back(make("olympiadbench", {"question"}, "final_answer", "", "id", "subfield"));
  return specs;
}

// A string-ish field (problem, id, subject, level) as text; nullopt when absent or null.
std::optional<std::string> text_field(const nlohmann::json& row, const std::string& field) {
  auto it = row.find(field);
  if (it == row.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<long long>());
  return it->dump();
}

std::string solution_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && !value.empty() && value.back().is_string())
    return value.back().get<std::string>();
  return {};
}

}  // namespace

const std::vector<BenchmarkSpec>& builtin_benchmarks() {
  static const std::vector<BenchmarkSpec> specs = make_builtins();
  return specs;
}

const BenchmarkSpec& builtin_benchmark(std::string_view name) {
  std::string known;
  for (const auto& spec : builtin_benchmarks()) {
    if (spec.name == name) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  fail("unknown benchmark '{}' (known: {})", name, known);
}

BenchmarkSpec resolve_benchmark(const std::string& name, bool have_data_file,
                                const FieldOverrides& overrides) {
  for (const auto& spec : builtin_benchmarks())
    if (spec.name == name) return apply_overrides(spec, overrides);
  if (!have_data_file) builtin_benchmark(name);  // throws, listing the known names
  BenchmarkSpec spec;
  spec.name = name;
  spec.problem_fields = {"problem"};
  spec.answer_field = "answer";
  return apply_overrides(spec, overrides);
}

std::filesystem::path resolve_benchmark_data(const std::string& data, const std::string& data_dir,
                                             const std::string& name) {
  if (!data.empty()) return data;
  std::string dir = data_dir;
  if (dir.empty()) {
    const char* env = std::getenv("RQAT_DATA_DIR");
    if (env == nullptr || *env == '\0')
      fail("give --data FILE, or --data-dir DIR (or $RQAT_DATA_DIR) holding {}/test.jsonl", name);
    dir = env;
  }
  return std::filesystem::path(dir) / name / "test.jsonl";
}

BenchmarkSpec apply_overrides(BenchmarkSpec spec, const FieldOverrides& overrides) {
  if (overrides.problem) spec.problem_fields = {*overrides.problem};
  if (overrides.answer) spec.answer_field = *overrides.answer;
  if (overrides.solution) spec.solution_field = *overrides.solution;
  if (overrides.id) spec.id_field = *overrides.id;
  if (overrides.subject) spec.subject_field = *overrides.subject;
  if (overrides.level) spec.level_field = *overrides.level;
  return spec;
}

std::optional<std::string> json_answer_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return value.dump();
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15)
      return std::to_string(static_cast<long long>(x));
    return value.dump();
  }
  if (value.is_array() && !value.empty()) {
    std::string joined;
    for (const auto& item : value) {
      auto text = json_answer_text(item);
      if (!text || item.is_array()) return std::nullopt;
      joined += (joined.empty() ? "" : ", ") + *text;
    }
    return joined;
  }
  return std::nullopt;
}

std::vector<BenchmarkProblem> load_benchmark(const std::filesystem::path& path,
                                             const BenchmarkSpec& spec) {
  const std::string file = path.string();
  if (!std::filesystem::is_regular_file(path))
    fail("{}: benchmark file not found (benchmark {})", file, spec.name);
  if (spec.problem_fields.empty()) fail("{}: benchmark {} has no problem field", file, spec.name);
  if (spec.answer_field.empty() && spec.solution_field.empty())
    fail("{}: benchmark {} has neither an answer nor a solution field", file, spec.name);

  std::vector<BenchmarkProblem> problems;
  io::for_each_jsonl_object<nlohmann::json>(path, [&](const nlohmann::json& row,
                                                      std::size_t number) {
    BenchmarkProblem problem;
    problem.line = number;
    std::optional<std::string> text;
    for (const auto& field : spec.problem_fields)
      if ((text = text_field(row, field))) break;
    if (!text) {
      std::string names;
      for (const auto& field : spec.problem_fields)
        names += (names.empty() ? "'" : " or '") + field + "'";
      fail("{}:{}: missing field {} on line {}", file, number, names, number);
    }
    problem.problem = *text;

    // Gold: the answer field, else the last \boxed{} of the solution field.
    std::optional<std::string> gold;
    const auto answer = spec.answer_field.empty() ? row.end() : row.find(spec.answer_field);
    const bool has_answer = answer != row.end() && !answer->is_null();
    if (has_answer) {
      gold = json_answer_text(*answer);
      if (!gold)
        fail("{}:{}: field '{}' on line {} is not a string, number or list of strings", file,
             number, spec.answer_field, number);
      if (spec.gsm8k_gold) {
        auto after = gsm8k_gold(*gold);
        if (!after)
          fail("{}:{}: field '{}' on line {} has no '####' gold answer", file, number,
               spec.answer_field, number);
        gold = after;
      }
    } else if (!spec.solution_field.empty()) {
      const auto solution = row.find(spec.solution_field);
      if (solution == row.end() || solution->is_null()) {
        if (spec.answer_field.empty())
          fail("{}:{}: missing field '{}' on line {}", file, number, spec.solution_field, number);
        fail("{}:{}: missing field '{}' (and '{}') on line {}", file, number, spec.answer_field,
             spec.solution_field, number);
      }
      gold = last_boxed(solution_text(*solution));
      if (!gold)
        fail("{}:{}: no \\boxed{{}} answer in field '{}' on line {}", file, number,
             spec.solution_field, number);
    } else {
      fail("{}:{}: missing field '{}' on line {}", file, number, spec.answer_field, number);
    }
    if (gold->find_first_not_of(" \t\r\n") == std::string::npos)
      fail("{}:{}: empty answer on line {}", file, number, number);
    problem.gold = *gold;

    if (spec.id_field.empty()) {
      problem.id = std::to_string(problems.size());
    } else {
      auto id = text_field(row, spec.id_field);
      if (!id) fail("{}:{}: missing field '{}' on line {}", file, number, spec.id_field, number);
      problem.id = *id;
    }
    if (!spec.subject_field.empty()) {
      auto subject = text_field(row, spec.subject_field);
      if (!subject)
        fail("{}:{}: missing field '{}' on line {}", file, number, spec.subject_field, number);
      problem.subject = *subject;
    }
    if (!spec.level_field.empty()) {
      auto level = text_field(row, spec.level_field);
      if (!level)
        fail("{}:{}: missing field '{}' on line {}", file, number, spec.level_field, number);
      problem.level = *level;
    }
    problems.push_back(std::move(problem));
  });
  return problems;
}

}  // namespace rqat::eval
