// Metrics of eval-math against closed forms and hand-worked examples.
#include "catch.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/sample_summary.h"
#include "test_util.h"

using rqat::eval::ProblemSamples;
using rqat::eval::Sample;

namespace {

Sample answer(const std::string& text, bool correct) {
  Sample sample;
  sample.answer = text;
  sample.correct = correct;
  return sample;
}

Sample none() { return Sample{}; }

// C(a, b) as a double, for small arguments.
double binomial(int a, int b) {
  if (b < 0 || b > a) return 0;
  double r = 1;
  for (int i = 1; i <= b; ++i) r = r * (a - b + i) / i;
  return r;
}

ProblemSamples problem(std::vector<bool> correct, std::string subject = "") {
  ProblemSamples p;
  p.tags["subject"] = std::move(subject);
  for (bool c : correct) {
    Sample s;
    s.correct = c;
    s.answer = c ? "1" : "2";
    p.samples.push_back(s);
  }
  return p;
}

}  // namespace

TEST_CASE("pass@k closed forms", "[metrics]") {
  using rqat::eval::pass_at_k;
  CHECK(pass_at_k(5, 2, 2) == Approx(0.7));   // 1 - C(3,2)/C(5,2) = 1 - 3/10
  CHECK(pass_at_k(4, 0, 4) == 0.0);           // n = k, c = 0
  CHECK(pass_at_k(4, 1, 4) == 1.0);           // n = k, c > 0
  CHECK(pass_at_k(7, 7, 3) == 1.0);           // c = n
  CHECK(pass_at_k(7, 0, 3) == 0.0);           // c = 0
  CHECK(pass_at_k(10, 3, 1) == Approx(0.3));  // k = 1: c / n
  for (int n = 1; n <= 16; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k)
        CHECK(pass_at_k(n, c, k) == Approx(1 - binomial(n - c, k) / binomial(n, k)).margin(1e-12));
  // Large n: stable, in [0, 1], monotone in k.
  double previous = 0;
  for (int k = 1; k <= 1000; k += 37) {
    double value = pass_at_k(1000, 3, k);
    CHECK(value >= previous);
    CHECK(value <= 1.0);
    previous = value;
  }
  rqat::test::require_error([] { pass_at_k(3, 1, 4); }, {"pass@k", "k=4"});
  rqat::test::require_error([] { pass_at_k(3, 4, 1); }, {"pass@k", "c=4"});
}

TEST_CASE("mean and standard error of a known vector", "[metrics]") {
  // {0, 1, 1, 0, 1}: mean 0.6, sample variance 0.3, SE sqrt(0.3 / 5).
  auto r = rqat::eval::mean_and_standard_error({0, 1, 1, 0, 1});
  CHECK(r.mean == Approx(0.6));
  CHECK(r.standard_error == Approx(std::sqrt(0.3 / 5)));
  auto one = rqat::eval::mean_and_standard_error({0.25});
  CHECK(one.mean == 0.25);
  CHECK(one.standard_error == 0);
  CHECK(rqat::eval::mean_and_standard_error({}).mean == 0);
}

TEST_CASE("maj@k: votes, ties by first occurrence, absent answers never win", "[metrics]") {
  using rqat::eval::majority_correct;
  // Plain majority: "5" twice beats "3" once.
  CHECK(majority_correct({answer("3", false), answer("5", true), answer("5", true)}, 3));
  // Tie 1-1: the first answer wins.
  CHECK_FALSE(majority_correct({answer("3", false), answer("5", true)}, 2));
  CHECK(majority_correct({answer("5", true), answer("3", false)}, 2));
  // Tie 2-2: the answer that occurred first wins, even if its second vote came last.
  CHECK(majority_correct(
      {answer("5", true), answer("3", false), answer("3", false), answer("5", true)}, 4));
  // Only the first k count.
  CHECK_FALSE(majority_correct({answer("3", false), answer("5", true), answer("5", true)}, 1));
  // Three missing answers do not outvote one real answer.
  CHECK(majority_correct({none(), none(), answer("5", true), none()}, 4));
  CHECK_FALSE(majority_correct({none(), none(), answer("4", false), none()}, 4));
  // No answer at all: wrong.
  CHECK_FALSE(majority_correct({none(), none()}, 2));
  rqat::test::require_error([] { majority_correct({none()}, 2); }, {"maj@2"});
}

TEST_CASE("compute_metrics and breakdown", "[metrics]") {
  std::vector<ProblemSamples> problems = {
      problem({true, true, false, false}, "Algebra"),    // 0.5
      problem({false, false, false, false}, "Algebra"),  // 0
      problem({true, true, true, true}, "Geometry"),     // 1
      problem({true, false, false, false}, "Geometry"),  // 0.25
  };
  problems[0].samples[0].tokens = 100;
  problems[0].samples[1].tokens = 300;
  problems[0].samples[1].truncated = true;
  problems[3].samples[2].truncated = true;

  auto m = rqat::eval::compute_metrics(problems, {1, 2, 4});
  CHECK(m.problems == 4);
  CHECK(m.samples == 16);
  CHECK(m.pass1 == Approx(0.4375));
  CHECK(m.pass1_standard_error ==
        Approx(rqat::eval::mean_and_standard_error({0.5, 0, 1, 0.25}).standard_error));
  CHECK(m.pass_at_k.at(1) == Approx(0.4375));
  // pass@2: (1 - C(2,2)/C(4,2)) + 0 + 1 + (1 - C(3,2)/C(4,2)) = 5/6 + 0 + 1 + 1/2, over 4.
  CHECK(m.pass_at_k.at(2) == Approx((5.0 / 6 + 1 + 0.5) / 4));
  CHECK(m.pass_at_k.at(4) == Approx(0.75));
  // maj@4: problem 0 ties 2-2 with "1" first -> correct; 1 wrong; 2 correct; 3 "2" wins -> wrong.
  CHECK(m.maj_at_k.at(4) == Approx(0.5));
  CHECK(m.maj_at_k.at(1) == Approx(0.75));  // first samples: right, wrong, right, right
  CHECK(m.mean_tokens == Approx(400.0 / 16));
  CHECK(m.truncated_share == Approx(2.0 / 16));

  auto by = rqat::eval::metrics_by(problems, "subject", {1});
  REQUIRE(by.size() == 2);
  CHECK(by.at("Algebra").pass1 == Approx(0.25));
  CHECK(by.at("Geometry").pass1 == Approx(0.625));
  CHECK(by.at("Geometry").problems == 2);
  auto by_missing = rqat::eval::metrics_by(problems, "level", {1});
  REQUIRE(by_missing.size() == 1);
  CHECK(by_missing.at("").problems == 4);

  rqat::test::require_error([&] { rqat::eval::compute_metrics(problems, {5}); }, {"k=5", "1..4"});
  CHECK(rqat::eval::compute_metrics({}, {1}).problems == 0);
}

TEST_CASE("mean reward: per-problem means averaged over problems, only when every sample has one",
          "[metrics]") {
  std::vector<ProblemSamples> problems = {problem({true, false}, "A"), problem({false}, "A"),
                                          problem({true, true, true}, "B")};
  // Study A's levels: 1.1 correct and formatted, 0.1 formatted, 0 neither.
  const std::vector<std::vector<double>> rewards = {{1.1, 0.1}, {0.0}, {1.1, 1.1, 0.1}};
  CHECK_FALSE(rqat::eval::compute_metrics(problems, {1}).reward.has_value());
  for (std::size_t p = 0; p < problems.size(); ++p)
    for (std::size_t s = 0; s < rewards[p].size(); ++s)
      problems[p].samples[s].reward = rewards[p][s];
  const auto m = rqat::eval::compute_metrics(problems, {1});
  REQUIRE(m.reward.has_value());
  const std::vector<double> means = {0.6, 0.0, 2.3 / 3};
  CHECK(m.reward->mean == Approx((0.6 + 0.0 + 2.3 / 3) / 3));
  CHECK(m.reward->standard_error ==
        Approx(rqat::eval::mean_and_standard_error(means).standard_error));
  const auto json = rqat::eval::metrics_json(m);
  CHECK(json["mean_reward"].get<double>() == Approx(m.reward->mean));
  CHECK(json.contains("mean_reward_stderr"));
  // One sample without a reward: no mean reward (a partial mean would not be the study's score).
  problems[1].samples[0].reward.reset();
  CHECK_FALSE(rqat::eval::compute_metrics(problems, {1}).reward.has_value());
  CHECK_FALSE(
      rqat::eval::metrics_json(rqat::eval::compute_metrics(problems, {1})).contains("mean_reward"));
}
