// The grader's LaTeX parser and expression evaluator alone, without extraction in front: exact
// rational evaluation, numeric evaluation with the free variables bound, and comparison of the
// input with itself, which must never report "not equal". Input: one answer.
#include <set>

#include "eval/grader.h"
#include "eval/latex_parser.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const std::string_view text = fuzz::as_text(data, size);
  try {
    eval::Budget budget(std::chrono::milliseconds(200));
    const eval::ExprPtr expr = eval::parse_latex(text, budget);
    if (expr == nullptr) return 0;
    (void)eval::evaluate_exact(*expr, budget);
    std::set<std::string> names;
    eval::collect_variables(*expr, names);
    eval::Env env;
    for (const auto& name : names) env[name] = eval::Real(0.5);
    (void)eval::evaluate_numeric(*expr, env, budget);
  } catch (const eval::Timeout&) {
  } catch (const eval::ParseError&) {
  }
  eval::Budget budget(std::chrono::milliseconds(400));
  try {
    eval::GradeOptions options;
    const eval::GradeKind kind = eval::compare_answers(text, text, budget, options);
    fuzz::require(kind != eval::GradeKind::not_equal, "an answer equals itself");
  } catch (const eval::Timeout&) {
  }
  return 0;
}
