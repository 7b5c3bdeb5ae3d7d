// Hostile inputs for the grader (issue 18): megabyte completions of repeated markers, megabyte
// golds, huge operands and deep nesting. Each must end in a verdict that is not "equal" (with a
// reason when it is not a plain not_equal) well inside the per-answer timeout and without
// exhausting the stack. The inputs are sized so that quadratic extraction, normalization or
// arithmetic would take many seconds: the time bound is a regression guard, deliberately generous.
#include "catch.h"

#include <chrono>
#include <string>
#include <thread>

#include "eval/answer_extraction.h"
#include "eval/budget.h"
#include "eval/grader.h"
#include "eval/latex_parser.h"
#include "eval/normalize.h"

using rqat::eval::GradeKind;
using rqat::eval::GradeResult;

namespace {

constexpr double kMaxSecondsPerGrade = 1.0;

std::string repeat(std::string_view piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Grades with the default options (2 s timeout) and checks the time and that the verdict is not
// "equal"; a timeout or unparseable verdict must say why.
GradeResult grade_hostile(const std::string& prediction, const std::string& gold) {
  const auto start = std::chrono::steady_clock::now();
  GradeResult result = rqat::eval::grade(prediction, gold);
  const double seconds = seconds_since(start);
  INFO("prediction " << prediction.size() << " bytes, gold " << gold.size()
                     << " bytes: " << rqat::eval::to_string(result.kind) << " in " << seconds
                     << " s (" << result.detail << ")");
  CHECK(seconds < kMaxSecondsPerGrade);
  CHECK(result.kind != GradeKind::equal);
  if (result.kind == GradeKind::timeout || result.kind == GradeKind::unparseable)
    CHECK_FALSE(result.detail.empty());
  return result;
}

}  // namespace

TEST_CASE("megabyte completions of repeated markers grade in linear time", "[grader][hostile]") {
  const size_t n = 100'000;
  SECTION("unclosed \\boxed{") { grade_hostile(repeat("\\boxed{", n) + repeat("x", 300'000), "7"); }
  SECTION("empty \\boxed{}") { grade_hostile(repeat("\\boxed{} ", n) + repeat(" ", 100'000), "7"); }
  SECTION("empty \\fbox{}") { grade_hostile(repeat("\\fbox{}  ", n) + repeat(" ", 100'000), "7"); }
  SECTION("\\boxed and \\fbox alternating, unclosed") {
    grade_hostile(repeat("\\fbox{\\boxed{ ", n), "7");
  }
  SECTION("\"The answer is\" on one line") { grade_hostile(repeat("The answer is ", n), "7"); }
  SECTION("\"The answer is\" then a megabyte of delimiters") {
    grade_hostile("The answer is " + repeat("$", 1'000'000), "7");
    grade_hostile("The answer is " + repeat("**", 500'000) + "8" + repeat(".", 500'000), "7");
    grade_hostile("The answer is " + repeat(": ", 500'000), "7");
  }
  // Issue 42's extraction steps: adjacent boxes joined into one answer, math spans and money.
  SECTION("adjacent boxes") { grade_hostile(repeat("\\boxed{1} and ", n), "7"); }
  SECTION("money that is not a math span") { grade_hostile(repeat("$5 and then ", n), "7"); }
  SECTION("unclosed math spans") {
    grade_hostile(repeat("\\( x ", n), "7");
    grade_hostile(repeat("x \\] ", n), "7");
    grade_hostile(repeat("$$ ", n), "7");
  }
  SECTION("\"The answer is\" on many lines") {
    grade_hostile(repeat("The answer is 8.\n", n), "7");
  }
  SECTION("one megabyte answer in a box") {
    GradeResult r = grade_hostile("\\boxed{" + repeat("1+", 500'000) + "1}", "7");
    CHECK(r.kind == GradeKind::unparseable);
  }
  SECTION("a megabyte number") { grade_hostile("The total is " + repeat("1,234", 200'000), "7"); }
  SECTION("the right box after a megabyte of unclosed boxes") {
    // Extraction itself still finds the closed box before the junk, in linear time.
    const std::string text = "\\boxed{7} " + repeat("\\boxed{x ", n);
    const auto start = std::chrono::steady_clock::now();
    CHECK(rqat::eval::grade(text, "7").kind == GradeKind::equal);
    CHECK(seconds_since(start) < kMaxSecondsPerGrade);
  }
}

TEST_CASE("megabyte gold answers are compared as text, quickly", "[grader][hostile]") {
  SECTION("boxed") { grade_hostile("\\boxed{7}", "\\boxed{" + repeat("1+", 500'000) + "1}"); }
  SECTION("GSM8K") { grade_hostile("\\boxed{7}", repeat("9", 1'000'000) + "\n#### 8"); }
  SECTION("a long list") {
    GradeResult r = grade_hostile("\\boxed{1,1}", repeat("1,", 500'000) + "1");
    CHECK(r.kind == GradeKind::not_equal);
    CHECK_FALSE(r.detail.empty());
  }
  SECTION("many boxes") { grade_hostile("\\boxed{7}", repeat("\\boxed{} ", 100'000)); }
  SECTION("the same megabyte on both sides is equal") {
    const std::string big = repeat("1+", 500'000) + "1";
    const auto start = std::chrono::steady_clock::now();
    CHECK(rqat::eval::grade("\\boxed{" + big + "}", big).kind == GradeKind::equal);
    CHECK(seconds_since(start) < kMaxSecondsPerGrade);
  }
}

TEST_CASE("huge operands are refused or bounded by the budget", "[grader][hostile]") {
  SECTION("a binomial of a million digits") {
    grade_hostile("\\boxed{\\binom{" + repeat("9", 1'000'000) + "}{3}}", "5");
  }
  SECTION("binomials too large to compute") {
    grade_hostile("\\boxed{\\binom{100000}{50000}}", "5");
    grade_hostile("\\boxed{\\binom{10^{1000}}{1000}}", "5");
    grade_hostile("\\boxed{\\binom{" + repeat("9", 1999) + "}{999}}", "5");
    grade_hostile("\\boxed{\\binom{" + repeat("9", 1999) + "}{999}+x}", "x");
  }
  SECTION("factorials and powers") {
    grade_hostile("\\boxed{(1000!)^{1000}}", "5");
    grade_hostile("\\boxed{(10^{2000})!}", "5");
    grade_hostile("\\boxed{2^{" + repeat("9", 1999) + "}}", "5");
    grade_hostile("\\boxed{\\frac{2^{99999}}{3^{60000}}}", "5");
  }
  SECTION("a sum of fractions whose denominators multiply") {
    std::string sum;
    for (int d = 1000; d < 2300; ++d) sum += "\\frac{1}{" + std::to_string(d) + "}+";
    REQUIRE(sum.size() < rqat::eval::kMaxAnswerChars);
    grade_hostile("\\boxed{" + sum + "1}", "5");
  }
  SECTION("many large powers: each allowed, together stopped by the deadline") {
    std::string sum;
    for (int i = 0; i < 1900; ++i) sum += "3^{9999}+";
    rqat::eval::GradeOptions options;
    options.timeout = std::chrono::milliseconds(300);
    const auto start = std::chrono::steady_clock::now();
    GradeResult r = rqat::eval::grade("\\boxed{" + sum + "1}", "5", options);
    CHECK(seconds_since(start) < kMaxSecondsPerGrade);
    CHECK(r.kind == GradeKind::timeout);
    CHECK_FALSE(r.detail.empty());
  }
  SECTION("small cases still compute exactly") {
    CHECK(rqat::eval::grade("\\boxed{\\binom{1000}{500}}", "\\binom{1000}{500}").kind ==
          GradeKind::equal);
    CHECK(rqat::eval::grade("\\boxed{\\binom{10}{3}}", "120").kind == GradeKind::equal);
    CHECK(rqat::eval::grade("\\boxed{\\frac{1}{2}+\\frac{1}{3}+\\frac{1}{7}}", "\\frac{41}{42}")
              .kind == GradeKind::equal);
  }
}

TEST_CASE("deep nesting is refused without exhausting the stack", "[grader][hostile]") {
  const size_t deep = 100'000;
  SECTION("a hundred thousand nested braces and parentheses") {
    grade_hostile("\\boxed{" + repeat("{", deep) + "1" + repeat("}", deep) + "}", "1");
    grade_hostile("\\boxed{" + repeat("(", deep) + "1" + repeat(")", deep) + "}", "1");
    grade_hostile("5", repeat("(", deep) + "1" + repeat(")", deep));
  }
  SECTION("nesting just under the answer length limit") {
    // 9,000 levels fit in kMaxAnswerChars: each layer must bound its own depth.
    const size_t levels = (rqat::eval::kMaxAnswerChars - 10) / 2;
    grade_hostile("\\boxed{" + repeat("{", levels) + "1" + repeat("}", levels) + "}", "1");
    grade_hostile("\\boxed{" + repeat("(", levels) + "1" + repeat(")", levels) + "}", "1");
    grade_hostile("\\boxed{" + repeat("-", 2 * levels) + "1}", "1");
    grade_hostile("\\boxed{" + repeat("\\frac{", 1900) + "1" + repeat("}{2}", 1900) + "}", "1");
    grade_hostile("\\boxed{" + repeat("\\sqrt{", 2500) + "1" + repeat("}", 2500) + "}", "1");
    grade_hostile("\\boxed{" + repeat("\\text{", 2500) + "1" + repeat("}", 2500) + "}", "2");
    grade_hostile("\\boxed{1" + repeat("/1", levels) + "}", "2");
    grade_hostile("\\boxed{3" + repeat("!", 2 * levels) + "}", "2");
    grade_hostile("\\boxed{2" + repeat("^2", levels) + "}", "2");
    // Tuples of tuples compare element by element, recursing once per level.
    std::string tuple = "1";
    std::string other = "2";
    for (int i = 0; i < 3000; ++i) {
      tuple = "(" + tuple + ",1)";
      other = "(" + other + ",1)";
    }
    grade_hostile("\\boxed{" + tuple + "}", other);
  }
  SECTION("parser and normalizer called directly") {
    const std::string braces = repeat("{", 9000) + "1" + repeat("}", 9000);
    CHECK_NOTHROW(rqat::eval::normalize_answer(braces));
    CHECK_NOTHROW(rqat::eval::normalize_answer(repeat("\\frac{", 1900) + repeat("}{2}", 1900)));
    rqat::eval::Budget budget(std::chrono::milliseconds(2000));
    CHECK_THROWS_AS(rqat::eval::parse_latex(braces, budget), rqat::eval::ParseError);
    CHECK_THROWS_AS(rqat::eval::parse_latex("1" + repeat("/1", 9000), budget),
                    rqat::eval::ParseError);
  }
  SECTION("in a worker thread, as grade_batch runs it") {
    std::thread worker([&] {
      grade_hostile("\\boxed{" + repeat("{", 9000) + "1" + repeat("}", 9000) + "}", "1");
    });
    worker.join();
  }
}

TEST_CASE("extraction charges the budget: an exhausted budget times out in extraction",
          "[grader][hostile]") {
  rqat::eval::Budget budget(std::chrono::milliseconds(0), 1000);
  CHECK_THROWS_AS(rqat::eval::extract_answer(repeat("\\boxed{} ", 100'000), &budget),
                  rqat::eval::Timeout);
  rqat::eval::GradeOptions options;
  options.timeout = std::chrono::milliseconds(0);
  GradeResult r = rqat::eval::grade(repeat("\\boxed{} ", 100'000), "7", options);
  CHECK(r.kind == GradeKind::timeout);
  CHECK_FALSE(r.detail.empty());
}
