// eval-math grade: re-grading a JSONL of completions on small files written here.
#include "catch.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/regrade.h"
#include "io/json_file.h"
#include "test_util.h"

using rqat::test::require_error;
using rqat::test::write_bytes;

namespace {

std::vector<rqat::io::Json> read_rows(const std::filesystem::path& path) {
  std::vector<rqat::io::Json> rows;
  std::string text = rqat::test::read_bytes(path);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    REQUIRE(end != std::string::npos);  // every line ends with a newline
    rows.push_back(rqat::io::Json::parse(text.substr(start, end - start)));
    start = end + 1;
  }
  return rows;
}

}  // namespace

TEST_CASE("regrade adds extracted and correct, keeps the other fields", "[regrade]") {
  rqat::test::TempDir tmp("regrade");
  write_bytes(tmp / "run.jsonl",
              "{\"id\":\"a\",\"completion\":\"so "
              "\\\\boxed{\\\\frac{1}{2}}\",\"gold\":\"0.5\",\"extra\":[1,{\"k\":2.5}]}\n"
              "{\"id\":\"b\",\"completion\":\"<think>2</think> The answer is 3.\",\"gold\":\"4\"}\n"
              "\n"
              "{\"id\":\"c\",\"completion\":\"I do not know.\",\"gold\":\"7\"}\n"
              "{\"id\":\"d\",\"completion\":\"#### 27\",\"gold\":27.0,\"correct\":false}\n");
  auto summary = rqat::eval::regrade_file(tmp / "run.jsonl", tmp / "out.jsonl", {}, 2);
  CHECK(summary.count == 4);
  CHECK(summary.correct == 2);
  CHECK(summary.unparseable == 1);
  CHECK(summary.timeouts == 0);
  CHECK(summary.accuracy == Approx(0.5));

  auto rows = read_rows(tmp / "out.jsonl");
  REQUIRE(rows.size() == 4);
  CHECK(rows[0]["id"] == "a");
  CHECK(rows[0]["extra"] == rqat::io::Json::parse("[1,{\"k\":2.5}]"));
  CHECK(rows[0]["extracted"] == "\\frac{1}{2}");
  CHECK(rows[0]["correct"] == true);
  CHECK(rows[1]["extracted"] == "3");
  CHECK(rows[1]["correct"] == false);
  CHECK(rows[2]["extracted"].is_null());
  CHECK(rows[2]["correct"] == false);
  CHECK(rows[3]["correct"] == true);  // replaced, not duplicated
  CHECK(rows[3]["gold"] == 27.0);
  // Field order: the input's, then extracted and correct.
  std::vector<std::string> keys;
  for (const auto& item : rows[0].items()) keys.push_back(item.key());
  CHECK(keys ==
        std::vector<std::string>{"id", "completion", "gold", "extra", "extracted", "correct"});

  auto table = rqat::eval::format_regrade_summary(summary);
  CHECK(table.find("count") != std::string::npos);
  CHECK(table.find("50.00%") != std::string::npos);

  // Regrading in place works.
  auto again = rqat::eval::regrade_file(tmp / "out.jsonl", tmp / "out.jsonl");
  CHECK(again.correct == 2);
  CHECK(read_rows(tmp / "out.jsonl").size() == 4);

  CHECK(rqat::eval::default_regrade_output("dir/run.jsonl") == "dir/run.graded.jsonl");
}

TEST_CASE("regrade of an empty file", "[regrade]") {
  rqat::test::TempDir tmp("regrade_empty");
  write_bytes(tmp / "e.jsonl", "");
  auto summary = rqat::eval::regrade_file(tmp / "e.jsonl", tmp / "o.jsonl");
  CHECK(summary.count == 0);
  CHECK(summary.accuracy == 0);
  CHECK(rqat::test::read_bytes(tmp / "o.jsonl").empty());
}

TEST_CASE("regrade errors name the file and line", "[regrade]") {
  rqat::test::TempDir tmp("regrade_errors");
  const auto out = tmp / "out.jsonl";
  require_error([&] { rqat::eval::regrade_file(tmp / "none.jsonl", out); },
                {"none.jsonl", "not found"});
  write_bytes(tmp / "nogold.jsonl",
              "{\"completion\":\"1\",\"gold\":\"1\"}\n{\"completion\":\"2\"}\n");
  require_error([&] { rqat::eval::regrade_file(tmp / "nogold.jsonl", out); },
                {"nogold.jsonl", "missing field 'gold' on line 2"});
  write_bytes(tmp / "nocompletion.jsonl", "{\"gold\":\"1\"}\n");
  require_error([&] { rqat::eval::regrade_file(tmp / "nocompletion.jsonl", out); },
                {"nocompletion.jsonl", "missing field 'completion' on line 1"});
  write_bytes(tmp / "bad.jsonl", "{\"completion\":\"1\",\"gold\":\"1\"}\n\n{oops\n");
  require_error([&] { rqat::eval::regrade_file(tmp / "bad.jsonl", out); },
                {"bad.jsonl:3", "invalid JSON"});
  write_bytes(tmp / "type.jsonl", "{\"completion\":5,\"gold\":\"1\"}\n");
  require_error([&] { rqat::eval::regrade_file(tmp / "type.jsonl", out); },
                {"type.jsonl", "'completion'", "line 1", "not a string"});
  CHECK_FALSE(std::filesystem::exists(out));  // nothing written on error
}
