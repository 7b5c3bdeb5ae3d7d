// Benchmark specs and the JSONL loader: every built-in spec on its real file in shared/data (the
// directory is rqat::test::shared_data_dir(): $RQAT_SHARED_DATA, else ../shared/data next to the
// source tree; without it that test prints "SKIPPED: ..."), and error cases on small files.
#include "catch.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "eval/benchmark.h"
#include "test_util.h"

namespace fs = std::filesystem;
using rqat::eval::BenchmarkSpec;
using rqat::eval::load_benchmark;
using rqat::test::require_error;
using rqat::test::write_bytes;

TEST_CASE("every built-in benchmark loads its real file", "[benchmark][data]") {
  const fs::path dir = rqat::test::shared_data_dir();
  if (!fs::exists(dir / "math500" / "test.jsonl")) {
    std::cout << "SKIPPED: no data directory at " << dir << " (set RQAT_SHARED_DATA)\n";
    return;
  }
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {"math500", 500}, {"gsm8k", 1319},       {"aime24", 30},        {"aime25", 30},
      {"amc23", 40},    {"minerva_math", 272}, {"olympiadbench", 675}};
  REQUIRE(rqat::eval::builtin_benchmarks().size() == expected.size());
  for (const auto& [name, count] : expected) {
    INFO(name);
    const auto& spec = rqat::eval::builtin_benchmark(name);
    auto problems = load_benchmark(dir / name / "test.jsonl", spec);
    CHECK(problems.size() == count);
    for (const auto& p : problems) {
      CHECK_FALSE(p.problem.empty());
      CHECK_FALSE(p.gold.empty());
      CHECK_FALSE(p.id.empty());
    }
  }
  auto math =
      load_benchmark(dir / "math500" / "test.jsonl", rqat::eval::builtin_benchmark("math500"));
  CHECK(math[0].subject == "Precalculus");
  CHECK(math[0].level == "2");
  CHECK(math[0].gold == "\\left( 3, \\frac{\\pi}{2} \\right)");
  auto gsm = load_benchmark(dir / "gsm8k" / "test.jsonl", rqat::eval::builtin_benchmark("gsm8k"));
  CHECK(gsm[0].gold == "18");
  auto amc = load_benchmark(dir / "amc23" / "test.jsonl", rqat::eval::builtin_benchmark("amc23"));
  CHECK(amc[0].gold == "27");
  auto minerva = load_benchmark(dir / "minerva_math" / "test.jsonl",
                                rqat::eval::builtin_benchmark("minerva_math"));
  CHECK_FALSE(minerva[0].subject.empty());
  auto olympiad = load_benchmark(dir / "olympiadbench" / "test.jsonl",
                                 rqat::eval::builtin_benchmark("olympiadbench"));
  CHECK(olympiad[0].id == "1606");
  CHECK_FALSE(olympiad[0].subject.empty());
}

TEST_CASE("benchmark loader: values, fallbacks and overrides", "[benchmark]") {
  rqat::test::TempDir tmp("benchmarks");
  write_bytes(
      tmp / "a.jsonl",
      "{\"problem\":\"p1\",\"answer\":\"3\",\"subject\":\"Algebra\",\"level\":4}\n"
      "\n"
      "{\"problem\":\"p2\",\"solution\":\"so \\\\boxed{\\\\frac{1}{2}} and "
      "\\\\boxed{7}\",\"subject\":\"G\",\"level\":\"Level 1\"}\r\n"
      "{\"problem\":\"p3\",\"answer\":12.0,\"subject\":\"G\",\"level\":1}\n"
      "{\"problem\":\"p4\",\"answer\":[\"(1,2)\",\"(3,4)\"],\"subject\":\"G\",\"level\":1}\n");
  auto problems = load_benchmark(tmp / "a.jsonl", rqat::eval::builtin_benchmark("math500"));
  REQUIRE(problems.size() == 4);
  CHECK(problems[0].gold == "3");
  CHECK(problems[0].level == "4");
  CHECK(problems[0].id == "0");
  CHECK(problems[0].line == 1);
  CHECK(problems[1].gold == "7");  // the last \boxed{} of the solution
  CHECK(problems[1].line == 3);
  CHECK(problems[1].level == "Level 1");
  CHECK(problems[2].gold == "12");
  CHECK(problems[3].gold == "(1,2), (3,4)");

  write_bytes(tmp / "g.jsonl", "{\"q\":\"x\",\"sol\":\"a\\n#### 1,234\",\"key\":\"k7\"}\n");
  rqat::eval::FieldOverrides overrides;
  overrides.problem = "q";
  overrides.answer = "sol";
  overrides.id = "key";
  auto spec = rqat::eval::apply_overrides(rqat::eval::builtin_benchmark("gsm8k"), overrides);
  auto g = load_benchmark(tmp / "g.jsonl", spec);
  REQUIRE(g.size() == 1);
  CHECK(g[0].problem == "x");
  CHECK(g[0].gold == "1234");
  CHECK(g[0].id == "k7");

  // amc23 takes `question`, else `problem`.
  write_bytes(tmp / "amc.jsonl", "{\"id\":1,\"problem\":\"only problem\",\"answer\":5}\n");
  auto amc = load_benchmark(tmp / "amc.jsonl", rqat::eval::builtin_benchmark("amc23"));
  CHECK(amc[0].problem == "only problem");
  CHECK(amc[0].id == "1");
}

TEST_CASE("benchmark loader errors name the file and line", "[benchmark]") {
  rqat::test::TempDir tmp("benchmark_errors");
  const auto& aime = rqat::eval::builtin_benchmark("aime25");
  require_error([&] { load_benchmark(tmp / "absent.jsonl", aime); }, {"absent.jsonl", "not found"});
  require_error([] { rqat::eval::builtin_benchmark("math5000"); },
                {"math5000", "math500", "gsm8k"});

  write_bytes(tmp / "bad.jsonl", "{\"problem\":\"p\",\"answer\":\"1\"}\n{\"problem\": \n");
  require_error([&] { load_benchmark(tmp / "bad.jsonl", aime); },
                {"bad.jsonl:2", "invalid JSON"});
  write_bytes(tmp / "array.jsonl", "[1,2]\n");
  require_error([&] { load_benchmark(tmp / "array.jsonl", aime); },
                {"array.jsonl", "line 1", "not a JSON object"});
  write_bytes(tmp / "noanswer.jsonl",
              "{\"problem\":\"p\",\"answer\":\"1\"}\n{\"problem\":\"p\",\"answer\":\"2\"}\n"
              "{\"problem\":\"p\"}\n");
  require_error([&] { load_benchmark(tmp / "noanswer.jsonl", aime); },
                {"noanswer.jsonl", "missing field 'answer' on line 3"});
  write_bytes(tmp / "noproblem.jsonl", "{\"answer\":\"1\"}\n");
  require_error([&] { load_benchmark(tmp / "noproblem.jsonl", aime); },
                {"noproblem.jsonl", "missing field 'problem' on line 1"});
  write_bytes(tmp / "empty.jsonl", "{\"problem\":\"p\",\"answer\":\"  \"}\n");
  require_error([&] { load_benchmark(tmp / "empty.jsonl", aime); },
                {"empty.jsonl", "empty answer on line 1"});
  write_bytes(tmp / "nobox.jsonl",
              "{\"problem\":\"p\",\"solution\":\"no box\",\"subject\":\"A\",\"level\":1}\n");
  require_error(
      [&] { load_benchmark(tmp / "nobox.jsonl", rqat::eval::builtin_benchmark("math500")); },
      {"nobox.jsonl", "line 1", "boxed", "'solution'"});
  write_bytes(tmp / "gsm.jsonl", "{\"question\":\"q\",\"answer\":\"no marker\"}\n");
  require_error([&] { load_benchmark(tmp / "gsm.jsonl", rqat::eval::builtin_benchmark("gsm8k")); },
                {"gsm.jsonl", "line 1", "####"});
  write_bytes(tmp / "nolevel.jsonl", "{\"problem\":\"p\",\"answer\":\"1\",\"subject\":\"A\"}\n");
  require_error(
      [&] { load_benchmark(tmp / "nolevel.jsonl", rqat::eval::builtin_benchmark("math500")); },
      {"nolevel.jsonl", "missing field 'level' on line 1"});
  write_bytes(tmp / "object.jsonl", "{\"problem\":\"p\",\"answer\":{\"a\":1}}\n");
  require_error([&] { load_benchmark(tmp / "object.jsonl", aime); },
                {"object.jsonl", "'answer'", "line 1"});
}
