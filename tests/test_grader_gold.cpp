// Every gold answer of MATH-500, GSM8K, AIME24 and AMC23 graded against itself, and MATH-500's
// `answer` against the last \boxed{} of its `solution`: all must be judged equal. The data
// directory is rqat::test::shared_data_dir() ($RQAT_SHARED_DATA, else
// ../shared/data next to the source tree); without it the test prints "SKIPPED: ..." and returns,
// which CTest reports as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
#include "catch.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "eval/answer_extraction.h"
#include "eval/grader.h"
#include "io/json_file.h"
#include "test_util.h"

namespace fs = std::filesystem;
using rqat::eval::GradeKind;

namespace {

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// AMC23 stores answers as numbers (27.0); the others as strings.
std::string as_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  std::string text = value.dump();
  return text;
}

struct Tally {
  int equal = 0;
  int total = 0;
  std::vector<std::string> misses;
};

void check_pair(Tally& tally, const std::string& prediction, const std::string& gold) {
  rqat::eval::GradeOptions options;
  options.extract_prediction = false;
  options.extract_gold = false;
  auto result = rqat::eval::grade(prediction, gold, options);
  ++tally.total;
  if (result.kind == GradeKind::equal) {
    ++tally.equal;
  } else {
    tally.misses.push_back(prediction + "  vs  " + gold + "  -> " +
                           rqat::eval::to_string(result.kind));
  }
}

void report(const std::string& name, const Tally& tally) {
  std::cout << name << ": " << tally.equal << " / " << tally.total << " equal\n";
  for (const auto& miss : tally.misses) std::cout << "  MISS " << miss << "\n";
  CHECK(tally.equal == tally.total);
}

}  // namespace

TEST_CASE("every gold answer is equal to itself and to its solution's boxed answer",
          "[grader][gold]") {
  const fs::path dir = rqat::test::shared_data_dir();
  if (!fs::exists(dir / "math500" / "test.jsonl")) {
    std::cout << "SKIPPED: no data directory at " << dir << " (set RQAT_SHARED_DATA)\n";
    return;
  }

  Tally math_self, math_solution, math_completion, gsm8k, aime24, amc23;
  for (const auto& row : read_jsonl(dir / "math500" / "test.jsonl")) {
    std::string answer = as_text(row.at("answer"));
    check_pair(math_self, answer, answer);
    auto boxed = rqat::eval::last_boxed(row.at("solution").get<std::string>());
    REQUIRE(boxed);
    check_pair(math_solution, *boxed, answer);
    // The full reference solution, read as a completion (extraction of its last box), grades equal.
    auto completion = rqat::eval::grade(row.at("solution").get<std::string>(), answer);
    if (completion.kind != GradeKind::equal) math_completion.misses.push_back(answer);
    ++math_completion.total;
    if (completion.kind == GradeKind::equal) ++math_completion.equal;
  }
  for (const auto& row : read_jsonl(dir / "gsm8k" / "test.jsonl")) {
    auto gold = rqat::eval::gsm8k_gold(row.at("answer").get<std::string>());
    REQUIRE(gold);
    check_pair(gsm8k, *gold, *gold);
    // A completion that ends like the reference solution grades equal against the gold.
    auto result = rqat::eval::grade(row.at("answer").get<std::string>(), *gold);
    CHECK(result.kind == GradeKind::equal);
  }
  if (fs::exists(dir / "aime24" / "test.jsonl"))
    for (const auto& row : read_jsonl(dir / "aime24" / "test.jsonl")) {
      std::string answer = as_text(row.at("answer"));
      check_pair(aime24, answer, answer);
      // AIME answers are integers 0-999 written with leading zeros ("025"): the number itself
      // counts.
      check_pair(aime24, std::to_string(std::stoi(answer)), answer);
    }
  if (fs::exists(dir / "amc23" / "test.jsonl"))
    for (const auto& row : read_jsonl(dir / "amc23" / "test.jsonl")) {
      std::string answer = as_text(row.at("answer"));
      check_pair(amc23, answer, answer);
      check_pair(amc23, std::to_string(static_cast<long long>(row.at("answer").get<double>())),
                 answer);
    }

  report("MATH-500 answer vs itself", math_self);
  report("MATH-500 answer vs solution's last boxed", math_solution);
  report("MATH-500 answer vs full solution as a completion", math_completion);
  report("GSM8K gold vs itself", gsm8k);
  report("AIME24 (itself, and without leading zeros)", aime24);
  report("AMC23 (itself, and as an integer)", amc23);
}
