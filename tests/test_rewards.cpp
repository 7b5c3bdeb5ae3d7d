// GRPO rewards: math correctness on MATH-style answers (correct, wrong, unparseable, pathological),
// the boxed-format bonus case by case, combined rewards and their parts, the spec registry and its
// errors, and parallel batch scoring against sequential scoring.
#include "rl/rewards.h"

#include "catch.h"

#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using rqat::rl::BoxedFormatReward;
using rqat::rl::has_single_boxed_answer;
using rqat::rl::make_reward;
using rqat::rl::MathCorrectnessReward;
using rqat::rl::MathRewardOptions;
using rqat::rl::RewardInput;

RewardInput input(std::string completion, std::string gold, bool truncated = false) {
  return {std::move(completion), std::move(gold), "a problem", truncated};
}

// A MATH-style gold solution: the answer sits in the last \boxed{}.
const std::string kSolutionHalfRoot3 =
    "The point is on the unit circle at angle $\\frac{\\pi}{3}$, so its $y$-coordinate is "
    "$\\boxed{\\frac{\\sqrt{3}}{2}}$.";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("math reward: correct, wrong and unparseable completions", "[rewards][math]") {
  const MathCorrectnessReward math;
  CHECK(math.name() == "math");
  struct Case {
    std::string completion, gold;
    double expected;
  };
  const std::vector<Case> cases = {
      // Correct, in equivalent forms.
      {"<think>sin 60 degrees...</think>So $y = \\boxed{\\dfrac{\\sqrt3}{2}}$.", kSolutionHalfRoot3,
       1},
      {"Expanding, the answer is $\\boxed{x^2+2x+1}$.", "(x+1)^2", 1},
      {"The solution set is $\\boxed{(-\\infty, 2) \\cup (3, \\infty)}$.",
       "(-\\infty,2)\\cup(3,\\infty)", 1},
      {"Thus $m+n = \\boxed{14}$.", "14", 1},
      {"The probability is $\\boxed{0.75}$.", "\\frac{3}{4}", 1},
      {"The final answer is $\\frac{14}{3}$.", "\\frac{14}{3}", 1},  // answer phrase, no box
      {"Janet earns 9 * 2 = 18 dollars.\n#### 18", "18", 1},
      // Wrong.
      {"So $y = \\boxed{\\frac{1}{2}}$.", kSolutionHalfRoot3, 0},
      {"The solution set is $\\boxed{(-\\infty, 2] \\cup (3, \\infty)}$.",
       "(-\\infty,2)\\cup(3,\\infty)", 0},
      {"<think>maybe \\boxed{14}</think>The answer is \\boxed{15}.", "14", 0},
      // Unparseable: nothing to extract, or not math.
      {"I am not sure how to solve this.", "14", 0},
      {"\\boxed{\\text{I give up}}", "14", 0},
  };
  for (const auto& c : cases) {
    INFO(c.completion << "  vs gold  " << c.gold);
    CHECK(math.score(input(c.completion, c.gold)) == c.expected);
  }
  CHECK(math.grade(input("I am not sure how to solve this.", "14")).kind ==
        rqat::eval::GradeKind::unparseable);
  CHECK(math.grade(input("\\boxed{15}", "14")).kind == rqat::eval::GradeKind::not_equal);

  // math_boxed accepts only a boxed answer: the phrase and #### forms above score 0 there.
  MathRewardOptions boxed;
  boxed.boxed_only = true;
  const MathCorrectnessReward math_boxed(boxed);
  CHECK(math_boxed.name() == "math_boxed");
  CHECK(math_boxed.score(input("The final answer is $\\frac{14}{3}$.", "\\frac{14}{3}")) == 0);
  CHECK(math_boxed.score(input("Janet earns 18 dollars.\n#### 18", "18")) == 0);
  CHECK(math_boxed.grade(input("The answer is 18", "18")).kind ==
        rqat::eval::GradeKind::unparseable);
  CHECK(math_boxed.score(
            input("<think>hmm</think>$\\boxed{\\dfrac{\\sqrt3}{2}}$", kSolutionHalfRoot3)) == 1);
  CHECK(math_boxed.score(input("<think>\\boxed{14}</think>so 14", "14")) == 0);
}

TEST_CASE("math reward stays fast and zero on pathological completions", "[rewards][math]") {
  MathRewardOptions options;
  options.grade.timeout = std::chrono::milliseconds(200);
  const MathCorrectnessReward math(options);
  std::string tower = "\\boxed{9^{9^{9^{9^{9}}}}}";
  std::string deep = "\\boxed{" + std::string(20000, '(') + "1" + std::string(20000, ')') + "}";
  std::string repeated;
  for (int i = 0; i < 20000; ++i) repeated += "so x = 3, then ";
  std::string unclosed;
  for (int i = 0; i < 30000; ++i) unclosed += "\\boxed{";
  // 30,000 unclosed boxes (210k characters) cost the grader's extraction seconds before it became
  // linear; the whole completion is graded now (no cut to the last boxes).
  for (const std::string& completion : {tower, deep, repeated + "\\boxed{" + tower, unclosed}) {
    const auto start = std::chrono::steady_clock::now();
    const double score = math.score(input(completion, "5"));
    const double seconds = seconds_since(start);
    INFO(completion.substr(0, 40) << "... (" << completion.size() << " chars) took " << seconds);
    CHECK(score == 0);
    CHECK(seconds < 2.0);
  }
  // Many boxes before a final well-formed one: the last one is the answer.
  std::string drafts;
  for (int i = 0; i < 500; ++i) drafts += "\\boxed{" + std::to_string(i) + "} ";
  CHECK(math.score(input(drafts + "so \\boxed{5}", "5")) == 1);
  CHECK(math.score(input(unclosed + " the answer is \\boxed{5}", "5")) == 1);
}

TEST_CASE("boxed format: exactly one well-formed box in the answer", "[rewards][format]") {
  struct Case {
    const char* completion;
    bool expected;
  };
  const std::vector<Case> cases = {
      {"The answer is $\\boxed{42}$.", true},
      {"So $\\boxed{\\frac{\\sqrt{3}}{2}}$", true},  // nested groups
      {"The set is $\\boxed{\\{1, 2\\}}$.", true},   // escaped braces are literal
      {"\\boxed {7}", true},                         // a space before the group
      {"<think>first \\boxed{3}, no: \\boxed{4}</think>Hence \\boxed{4}.", true},  // drafts
      {"\\boxedtext{1} and then \\boxed{2}", true},          // \boxedtext is another command
      {"The answer is 42.", false},                          // no box
      {"\\boxed{1} or \\boxed{2}", false},                   // two boxes
      {"\\boxed{\\boxed{2}}", false},                        // nested boxes
      {"\\boxed{}", false},                                  // empty
      {"\\boxed{   }", false},                               // blank
      {"\\boxed{\\frac{1}{2}", false},                       // unclosed
      {"\\boxed{\\}", false},                                // \} does not close the group
      {"\\boxed 5", false},                                  // no braces
      {"<think>\\boxed{4}</think>The answer is 4.", false},  // box only in the thinking
  };
  const BoxedFormatReward format;  // default bonus 0.1
  for (const auto& c : cases) {
    INFO(c.completion);
    CHECK(has_single_boxed_answer(c.completion) == c.expected);
    CHECK(format.score(input(c.completion, "4")) == (c.expected ? 0.1 : 0.0));
    CHECK(format.score(input(c.completion, "4", /*truncated=*/true)) == 0.0);
  }
  CHECK(BoxedFormatReward(0.25).score(input("\\boxed{1}", "1")) == 0.25);
  CHECK(BoxedFormatReward(0.25, rqat::rl::FormatRule::kLastBox)
            .score(input("\\boxed{1} \\boxed{}", "1", true)) == 0.25);

  // Linear time on adversarial text: 200k unclosed boxes, one box over 1 MB of open braces.
  std::string many;
  for (int i = 0; i < 200000; ++i) many += "\\boxed{";
  const std::string braces = "\\boxed{" + std::string(1 << 20, '{');
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(has_single_boxed_answer(many));
  CHECK_FALSE(has_single_boxed_answer(braces));
  CHECK(seconds_since(start) < 1.0);
}

TEST_CASE("study A's format rule: the last \\boxed opens a group that closes", "[rewards]") {
  struct Case {
    std::string completion;
    bool expected;
  };
  const std::vector<Case> cases = {
      {"So \\boxed{4}.", true},
      {"\\boxed{1} or \\boxed{2}", true},  // several boxes: the last one counts
      {"\\boxed{3} then \\boxed{\\frac{1}{2}} more text", true},  // nested groups, text after
      {"\\boxed{}", true},                                        // empty content parses
      {"\\boxed{\\{1\\}}", true},                            // braces counted raw: { { } } closes
      {"\\boxed{1} and finally \\boxed{2", false},           // the last box is unclosed
      {"\\boxed 5", false},                                  // no brace group
      {"\\boxed {7}", false},                                // a space before the group
      {"\\fbox{4}", false},                                  // \fbox is not \boxed
      {"The answer is 42.", false},                          // no box
      {"<think>\\boxed{4}</think>The answer is 4.", false},  // box only in the thinking
  };
  const auto reward = make_reward("math_boxed+format_last_box");
  CHECK(reward->name() == "math_boxed+format_last_box:0.1");
  for (const auto& c : cases) {
    INFO(c.completion);
    CHECK(rqat::rl::last_box_parses(c.completion) == c.expected);
    // Truncation does not matter to this rule (it does to `format`).
    for (const bool truncated : {false, true})
      CHECK(reward->breakdown(input(c.completion, "9", truncated)).parts[1].value ==
            (c.expected ? 1.0 : 0.0));
  }
  // The study's levels: correct and formatted 1.1, formatted 0.1, neither 0.
  CHECK(reward->score(input("\\boxed{3} no wait \\boxed{4}", "4", /*truncated=*/true)) ==
        Approx(1.1));
  CHECK(reward->score(input("\\boxed{}", "4")) == Approx(0.1));
  CHECK(reward->score(input("It is 4.", "4")) == 0.0);

  // Linear time: 200k boxes, the last one over 1 MB of open braces.
  std::string many;
  for (int i = 0; i < 200000; ++i) many += "\\boxed{";
  many += std::string(1 << 20, '{');
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(rqat::rl::last_box_parses(many));
  CHECK(seconds_since(start) < 1.0);
}

TEST_CASE("combined rewards from specs: totals and parts", "[rewards][registry]") {
  const auto reward = make_reward("math+format");
  CHECK(reward->name() == "math+format:0.1");
  REQUIRE(reward->parts().size() == 2);
  CHECK(reward->parts()[1].weight == 0.1);
  // The study's reward levels {0, 0.1, 1.1}, plus 1 for a correct unboxed answer.
  CHECK(reward->score(input("<think>..</think>\\boxed{\\frac{3}{4}}", "0.75")) == Approx(1.1));
  CHECK(reward->score(input("\\boxed{\\frac{3}{5}}", "0.75")) == Approx(0.1));
  CHECK(reward->score(input("The answer is 0.75", "\\frac34")) == Approx(1.0));
  CHECK(reward->score(input("no idea", "\\frac34")) == 0.0);
  CHECK(reward->score(input("\\boxed{\\frac{3}{4}}", "0.75", /*truncated=*/true)) == 1.0);

  const auto parts = reward->breakdown(input("\\boxed{\\frac{3}{5}}", "0.75"));
  REQUIRE(parts.parts.size() == 2);
  CHECK(parts.parts[0].name == "math");
  CHECK(parts.parts[0].weight == 1.0);
  CHECK(parts.parts[0].value == 0.0);
  CHECK(parts.parts[1].name == "format");
  CHECK(parts.parts[1].weight == 0.1);
  CHECK(parts.parts[1].value == 1.0);
  CHECK(parts.total == Approx(0.1));

  const auto weighted = make_reward(" math_boxed + format:0.25 ");
  CHECK(weighted->name() == "math_boxed+format:0.25");
  CHECK(weighted->score(input("\\boxed{7}", "7")) == Approx(1.25));
  CHECK(weighted->score(input("The answer is 7", "7")) == 0.0);
  // Weight 0 logs the part without changing the reward; names round-trip.
  const auto logged = make_reward("math+format:0");
  CHECK(logged->score(input("\\boxed{7}", "7")) == 1.0);
  CHECK(logged->breakdown(input("\\boxed{7}", "7")).parts[1].value == 1.0);
  CHECK(make_reward(logged->name())->name() == logged->name());
  CHECK(make_reward("format:-0.5")->score(input("\\boxed{7}", "7")) == -0.5);
}

TEST_CASE("the registry takes user rewards and rejects bad specs naming them",
          "[rewards][registry]") {
  using rqat::test::require_error;
  struct LengthPenalty : rqat::rl::RewardFunction {
    std::string name() const override { return "length_penalty"; }
    double score(const RewardInput& in) const override {
      return -static_cast<double>(in.completion.size()) / 1000.0;
    }
  };
  rqat::rl::register_reward(
      "length_test", [] { return std::make_unique<LengthPenalty>(); }, 2.0);
  const auto names = rqat::rl::registered_rewards();
  CHECK(names ==
        std::vector<std::string>{"format", "format_last_box", "length_test", "math", "math_boxed"});

  const auto reward = make_reward("math+length_test");
  CHECK(reward->name() == "math+length_test:2");  // the registry name, not the class's name()
  const std::string completion = "The answer is \\boxed{12}.";  // 25 characters
  CHECK(reward->score(input(completion, "12")) == Approx(1 - 2 * 0.025));
  CHECK(make_reward("length_test:0.5")->score(input(completion, "12")) == Approx(-0.0125));

  require_error([] { rqat::rl::register_reward("math", [] { return nullptr; }); },
                {"'math'", "already exists"});
  require_error([] { rqat::rl::register_reward("Bad-Name", [] { return nullptr; }); },
                {"'Bad-Name'", "not a valid reward name"});
  require_error([] { rqat::rl::register_reward("empty_factory", {}); },
                {"'empty_factory'", "empty"});
  rqat::rl::register_reward("null_test", [] { return nullptr; });
  require_error([] { make_reward("null_test", "--reward"); },
                {"--reward", "'null_test'", "returned nothing"});

  require_error([] { make_reward("", "--reward"); }, {"--reward ''", "empty reward name"});
  require_error([] { make_reward("math+", "--reward"); }, {"'math+'", "empty reward name"});
  require_error([] { make_reward("math+fromat:0.1", "--reward"); },
                {"--reward 'math+fromat:0.1'", "unknown reward 'fromat'",
                 "known: format, format_last_box, length_test, math, math_boxed"});
  require_error([] { make_reward("format:abc", "--reward"); },
                {"'format:abc'", "weight of 'format'", "'abc'"});
  require_error([] { make_reward("format:", "--reward"); }, {"'format:'", "weight of 'format'"});
  require_error([] { make_reward("format:inf", "--reward"); }, {"'format:inf'", "finite"});
  require_error([] { make_reward("format:0.1x", "--reward"); }, {"'0.1x'"});
  require_error([] { make_reward("math+math", "--reward"); }, {"'math+math'", "appears twice"});
}

TEST_CASE("parallel batch scoring equals sequential scoring", "[rewards][batch]") {
  // Seeded MATH-style inputs: correct in several forms, wrong, unboxed, unparseable, truncated.
  std::mt19937_64 rng(2024);
  std::uniform_int_distribution<int> number(2, 99), kind(0, 6);
  std::vector<RewardInput> inputs;
  for (int i = 0; i < 160; ++i) {
    const int a = number(rng), b = number(rng);
    const std::string gold = "The total is $" + std::to_string(a) + "+" + std::to_string(b) +
                             " = \\boxed{" + std::to_string(a + b) + "}$.";
    std::string completion;
    switch (kind(rng)) {
      case 0:
        completion = "<think>adding</think>\\boxed{" + std::to_string(a + b) + "}";
        break;
      case 1:
        completion = "\\boxed{\\frac{" + std::to_string(2 * (a + b)) + "}{2}}";
        break;
      case 2:
        completion = "So \\boxed{" + std::to_string(a + b + 1) + "}";
        break;
      case 3:
        completion = "The answer is " + std::to_string(a + b) + ".";
        break;
      case 4:
        completion = "I cannot tell.";
        break;
      case 5:
        completion = "\\boxed{" + std::to_string(a) + "} or \\boxed{" + std::to_string(b) + "}";
        break;
      default:
        completion = "<think>" + std::to_string(a) + " plus " + std::to_string(b);
        break;
    }
    inputs.push_back({completion, gold, "Add the numbers.", kind(rng) == 0});
  }
  const auto reward = make_reward("math+format");
  const auto sequential = rqat::rl::score_batch(*reward, inputs, 1);
  const auto parallel = rqat::rl::score_batch(*reward, inputs, 4);
  REQUIRE(sequential.size() == inputs.size());
  REQUIRE(parallel.size() == inputs.size());
  double sum = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i << ": " << inputs[i].completion);
    CHECK(parallel[i].total == sequential[i].total);
    CHECK(sequential[i].total == reward->score(inputs[i]));
    REQUIRE(parallel[i].parts.size() == 2);
    CHECK(parallel[i].parts[0].value == sequential[i].parts[0].value);
    CHECK(parallel[i].parts[1].value == sequential[i].parts[1].value);
    sum += sequential[i].total;
  }
  // Every reward level occurs: the batch is not trivially constant.
  std::set<double> levels;
  for (const auto& s : sequential) levels.insert(std::round(s.total * 10) / 10);
  CHECK(levels == std::set<double>{0.0, 0.1, 1.0, 1.1});
  CHECK(rqat::rl::score_batch(*reward, {}, 4).empty());

  // An exception inside a worker reaches the caller.
  struct Throwing : rqat::rl::RewardFunction {
    std::string name() const override { return "throwing"; }
    double score(const RewardInput& in) const override {
      if (in.completion == "boom") throw std::runtime_error("boom");
      return 0;
    }
  };
  std::vector<RewardInput> with_bomb(40, input("fine", "1"));
  with_bomb[17].completion = "boom";
  CHECK_THROWS_WITH(rqat::rl::score_batch(Throwing(), with_bomb, 3), "boom");
}
