// Tests of the eval-math grader (lib/eval): a table of (prediction, gold, expected) cases grouped
// by rule, then extraction helpers, timeouts on pathological inputs, unparseable answers and
// batches.
#include "catch.h"

#include <chrono>
#include <string>
#include <vector>

#include "eval/answer_extraction.h"
#include "eval/equation_form.h"
#include "eval/grader.h"
#include "eval/inequality.h"
#include "eval/normalize.h"

using rqat::eval::GradeKind;
using rqat::eval::GradeOptions;

namespace {

constexpr GradeKind EQ = GradeKind::equal;
constexpr GradeKind NE = GradeKind::not_equal;
constexpr GradeKind UP = GradeKind::unparseable;

struct Case {
  const char* group;
  const char* prediction;  // a full completion: the answer is extracted from it
  const char* gold;
  GradeKind expected;
};

// clang-format off
const std::vector<Case> kCases = {
  // --- extraction: boxed, fbox, nested braces, answer phrases, last number, </think>
  {"extraction", "So the result is \\boxed{42}.", "42", EQ},
  {"extraction", "First \\boxed{1}, then \\boxed{2}", "2", EQ},
  {"extraction", "First \\boxed{1}, then \\boxed{2}", "1", NE},
  {"extraction", "\\boxed{\\frac{1}{2}}", "\\frac12", EQ},
  {"extraction", "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", EQ},
  {"extraction", "the value is $\\boxed 5$.", "5", EQ},
  {"extraction", "\\fbox{7}", "7", EQ},
  {"extraction", "The final answer is 12.", "12", EQ},
  {"extraction", "The final answer is $\\frac{3}{4}$.", "0.75", EQ},
  {"extraction", "Therefore the answer is: **18**", "18", EQ},
  {"extraction", "Answer: 3/5", "\\frac{3}{5}", EQ},
  {"extraction", "She has 3 apples and buys 4 more, so 7 apples.", "7", EQ},
  {"extraction", "It costs $1,250 in total", "1250", EQ},
  {"extraction", "The total is -15 degrees", "-15", EQ},
  {"extraction", "<think>maybe \\boxed{3}</think>The answer is \\boxed{4}", "4", EQ},
  {"extraction", "<think>maybe \\boxed{3}</think>The answer is \\boxed{4}", "3", NE},
  {"extraction", "<think>I think it is \\boxed{9} but let me check", "9", EQ},
  {"extraction", "<think>long thoughts</think>\n\nSo we get 10.", "10", EQ},
  {"extraction", "\\boxed{\\{1,2\\}}", "\\{1,2\\}", EQ},
  {"extraction", "\\boxed{x^{2}+\\left(y\\right)}", "x^2+y", EQ},
  {"extraction", "Final: \\boxed{(1,2)} and an unclosed \\boxed{3", "(1,2)", EQ},
  {"extraction", "Janet makes 9 * 2 = $18 every day.\n#### 18", "18", EQ},
  {"extraction", "\\boxed{\\text{(B)}}", "B", EQ},
  {"extraction", "The answer is 2.5.", "\\frac52", EQ},
  // Minerva's closing line (its few-shot prompt's format, kept by many fine-tuned models).
  {"extraction", "so x = 4.\nFinal Answer: The final answer is $4$. I hope it is correct.", "4", EQ},
  {"extraction", "Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", EQ},
  {"extraction", "Final Answer: The final answer is 12. I hope it is correct.", "12", EQ},
  {"extraction", "Final Answer: The final answer is $(1,-2)$. I hope it is correct.", "(1,-2)", EQ},
  {"extraction", "Final Answer: The final answer is $\\text{yes}$. I hope it is correct.", "Yes", EQ},
  {"extraction", "Final Answer: The final answer is $5$. I hope it is correct.", "4", NE},
  {"extraction", "The answer is $x = 2$, which checks out.", "2", EQ},
  {"extraction", "The answer is $2$ and $3$.", "2, 3", EQ},

  // --- normalization: wrappers, spacing, \left/\right, dfrac, leading zeros, +, periods, x=
  {"normalization", "\\boxed{\\text{5}}", "5", EQ},
  {"normalization", "\\boxed{\\textbf{5}}", "5", EQ},
  {"normalization", "\\boxed{\\mathrm{5}}", "5", EQ},
  {"normalization", "\\boxed{\\mbox{5}}", "5", EQ},
  {"normalization", "\\boxed{\\left(\\frac{1}{2}\\right)}", "\\frac{1}{2}", EQ},
  {"normalization", "\\boxed{1\\!000}", "1000", EQ},
  {"normalization", "\\boxed{\\dfrac{3}{4}}", "\\frac34", EQ},
  {"normalization", "\\boxed{\\tfrac{3}{4}}", "\\frac{3}{4}", EQ},
  {"normalization", "\\boxed{\\frac12}", "\\frac{1}{2}", EQ},
  {"normalization", "\\boxed{\\frac 59}", "\\frac{5}{9}", EQ},
  {"normalization", "\\boxed{\\frac9{19}}", "\\frac{9}{19}", EQ},
  {"normalization", "\\boxed{\\sqrt2}", "\\sqrt{2}", EQ},
  {"normalization", "\\boxed{.5}", "0.5", EQ},
  {"normalization", "\\boxed{0.5}", ".5", EQ},
  {"normalization", "\\boxed{+7}", "7", EQ},
  {"normalization", "\\boxed{7.}", "7", EQ},
  {"normalization", "\\boxed{x=5}", "5", EQ},
  {"normalization", "\\boxed{x = 5}", "5", EQ},
  {"normalization", "\\boxed{5}", "x=5", EQ},
  {"normalization", "\\boxed{y = 2x + 3}", "y=2x+3", EQ},
  {"normalization", "\\boxed{2x+3}", "y = 2x + 3", EQ},
  {"normalization", "\\boxed{\\theta = \\frac{\\pi}{4}}", "\\frac{\\pi}{4}", EQ},
  {"normalization", "\\boxed{k = 3}", "3", EQ},
  {"normalization", "\\boxed{x \\in [-2,7]}", "[-2,7]", EQ},
  {"normalization", "\\boxed{\\displaystyle \\frac{1}{3}}", "1/3", EQ},
  {"normalization", "\\boxed{\\, 3 \\;}", "3", EQ},
  {"normalization", "\\boxed{3\\ }", "3", EQ},
  {"normalization", "\\boxed{ 3 }", "3", EQ},
  {"normalization", "\\boxed{$3$}", "3", EQ},
  {"normalization", "\\boxed{\\cfrac{2}{3}}", "2/3", EQ},
  {"normalization", "\\boxed{−4}", "-4", EQ},
  {"normalization", "\\boxed{\\textbf{(C)}}", "C", EQ},
  {"normalization", "\\boxed{\\sqrt[3]{8}}", "2", EQ},
  {"normalization", "\\boxed{\\sqrt[3]8}", "2", EQ},

  // --- units, percent, degrees, money, thousands
  {"units", "\\boxed{15\\mbox{ cm}^2}", "15", EQ},
  {"units", "\\boxed{15}", "15\\mbox{ cm}^2", EQ},
  {"units", "\\boxed{864 \\text{ inches}^2}", "864", EQ},
  {"units", "\\boxed{5.4 \\text{ cents}}", "5.4", EQ},
  {"units", "\\boxed{12 \\text{ meters}}", "12", EQ},
  {"units", "\\boxed{12 \\text{ feet}}", "12", EQ},
  {"units", "\\boxed{30 \\text{ minutes}}", "30", EQ},
  {"units", "\\boxed{7 \\text{ units}}", "7", EQ},
  {"units", "\\boxed{4 \\text{ square units}}", "4", EQ},
  {"units", "\\boxed{60 \\text{ mph}}", "60", EQ},
  {"units", "\\boxed{3 \\text{ hours}}", "3", EQ},
  {"units", "\\boxed{20 \\text{ dollars}}", "20", EQ},
  {"units", "\\boxed{\\$18.90}", "18.90", EQ},
  {"units", "\\boxed{18.9}", "\\$18.90", EQ},
  {"units", "\\boxed{\\$36}", "36", EQ},
  {"units", "\\boxed{36 dollars}", "\\$36", EQ},
  {"units", "\\boxed{2\\pi \\text{ cm}}", "2\\pi", EQ},
  {"units", "\\boxed{50\\%}", "50", EQ},
  {"units", "\\boxed{50}", "50\\%", EQ},
  {"units", "\\boxed{50%}", "50\\%", EQ},
  {"units", "\\boxed{0.5}", "50\\%", NE},
  {"units", "\\boxed{12.5\\%}", "12.5", EQ},
  {"units", "\\boxed{30^\\circ}", "30", EQ},
  {"units", "\\boxed{30^{\\circ}}", "30^\\circ", EQ},
  {"units", "\\boxed{30}", "30^\\circ", EQ},
  {"units", "\\boxed{30 \\text{ degrees}}", "30^\\circ", EQ},
  {"units", "\\boxed{30°}", "30", EQ},
  {"units", "\\boxed{\\frac{270}{7}}", "\\frac{270}7\\text{ degrees}", EQ},
  {"units", "\\boxed{1,000}", "1000", EQ},
  {"units", "\\boxed{1000}", "1,000", EQ},
  {"units", "\\boxed{10,080}", "10,\\!080", EQ},
  {"units", "\\boxed{10080}", "10,\\!080", EQ},
  {"units", "\\boxed{11111111100}", "11,\\! 111,\\! 111,\\! 100", EQ},
  {"units", "\\boxed{32348}", "\\$32,\\!348", EQ},
  {"units", "\\boxed{1,234,567}", "1234567", EQ},
  {"units", "\\boxed{58,500}", "58500", EQ},
  {"units", "\\boxed{1{,}000}", "1000", EQ},
  {"units", "\\boxed{1,000.5}", "1000.5", EQ},
  {"units", "\\boxed{12,34}", "1234", NE},

  // --- fractions and rationals, exact
  {"fractions", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", EQ},
  {"fractions", "\\boxed{1/2}", "\\frac{1}{2}", EQ},
  {"fractions", "\\boxed{0.25}", "\\frac{1}{4}", EQ},
  {"fractions", "\\boxed{\\frac{6}{8}}", "0.75", EQ},
  {"fractions", "\\boxed{-\\frac{3}{8}}", "-\\frac{3}{8}", EQ},
  {"fractions", "\\boxed{\\frac{-3}{8}}", "-\\frac{3}{8}", EQ},
  {"fractions", "\\boxed{\\frac{3}{-8}}", "-\\frac{3}{8}", EQ},
  {"fractions", "\\boxed{-0.375}", "-\\frac{3}{8}", EQ},
  {"fractions", "\\boxed{\\frac{1997}{2}}", "998.5", EQ},
  {"fractions", "\\boxed{137\\frac{1}{2}}", "137 \\frac{1}{2}", EQ},
  {"fractions", "\\boxed{\\frac{10}{11}}", "10/11", EQ},
  {"fractions", "\\boxed{\\frac{4}{9}}", "\\frac{4}{9}", EQ},
  {"fractions", "\\boxed{\\frac{14}{3}}", "\\frac{28}{6}", EQ},
  // Decimal approximations of repeating fractions need a relative error of at most 1e-4 (Qwen's
  // rel_tol; docs/grading.md 5.4). These used to pass by rounding to the literal's places with 3
  // significant digits (0.333, 0.667, 0.666 == 1/3, 2/3), looser than every reference grader.
  {"fractions", "\\boxed{\\frac{1}{3}}", "0.3333", EQ},
  {"fractions", "\\boxed{0.3333}", "\\frac{1}{3}", EQ},
  {"fractions", "\\boxed{0.33333}", "\\frac{1}{3}", EQ},
  {"fractions", "\\boxed{0.333}", "\\frac{1}{3}", NE},
  {"fractions", "\\boxed{0.33}", "\\frac{1}{3}", NE},
  {"fractions", "\\boxed{0.6667}", "\\frac{2}{3}", EQ},
  {"fractions", "\\boxed{0.667}", "\\frac{2}{3}", NE},
  {"fractions", "\\boxed{0.666}", "\\frac{2}{3}", NE},
  {"fractions", "\\boxed{-0.1667}", "-\\frac{1}{6}", NE},  // 2e-4 relative error
  {"fractions", "\\boxed{-0.16667}", "-\\frac{1}{6}", EQ},
  {"fractions", "\\boxed{0.1429}", "\\frac{1}{7}", NE},
  {"fractions", "\\boxed{0.14286}", "\\frac{1}{7}", EQ},
  {"fractions", "\\boxed{3333.3}", "\\frac{10000}{3}", EQ},
  {"fractions", "\\boxed{0.75001}", "\\frac{3}{4}", NE},
  {"fractions", "\\boxed{0.50001}", "0.5", NE},
  {"fractions", "\\boxed{0.67}", "\\frac{2}{3}", NE},
  {"fractions", "\\boxed{0.3}", "\\frac{1}{3}", NE},
  {"fractions", "\\boxed{0.665}", "\\frac{2}{3}", NE},
  {"fractions", "\\boxed{\\frac{1}{2}}", "2", NE},
  {"fractions", "\\boxed{\\frac{3}{56}}", "\\frac{3}{65}", NE},
  {"fractions", "\\boxed{\\frac{9}{256}}", "0.03515625", EQ},
  {"fractions", "\\boxed{.0000672}", "6.72 \\times 10^{-5}", EQ},
  {"fractions", "\\boxed{\\frac{1}{2}+\\frac{1}{3}}", "\\frac{5}{6}", EQ},
  {"fractions", "\\boxed{\\frac{\\frac{1}{2}}{3}}", "\\frac16", EQ},
  {"fractions", "\\boxed{3 \\div 4}", "0.75", EQ},
  {"fractions", "\\boxed{\\frac{11}{2}}", "5.5", EQ},
  {"fractions", "\\boxed{5.50}", "\\frac{11}{2}", EQ},
  {"fractions", "\\boxed{1\\frac{4}{5}}", "\\frac{9}{5}", EQ},
  {"fractions", "\\boxed{\\frac{16}{5}}", "3.2", EQ},
  {"fractions", "\\boxed{3.21}", "3.21", EQ},
  {"fractions", "\\boxed{3.2}", "3.21", NE},
  {"fractions", "\\boxed{326.5}", "\\frac{653}{2}", EQ},
  {"fractions", "\\boxed{27.0}", "27", EQ},
  {"fractions", "\\boxed{26.9}", "27", NE},
  {"fractions", "\\boxed{2.000}", "2", EQ},

  // --- roots
  {"roots", "\\boxed{\\sqrt{12}}", "2\\sqrt{3}", EQ},
  {"roots", "\\boxed{2\\sqrt3}", "\\sqrt{12}", EQ},
  {"roots", "\\boxed{\\sqrt{4}}", "2", EQ},
  {"roots", "\\boxed{\\sqrt{\\frac{9}{4}}}", "1.5", EQ},
  {"roots", "\\boxed{\\frac{\\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}", EQ},
  {"roots", "\\boxed{\\frac{3\\sqrt{3}}{4}}", "\\frac{3}{4}\\sqrt{3}", EQ},
  {"roots", "\\boxed{11\\sqrt2}", "11\\sqrt{2}", EQ},
  {"roots", "\\boxed{\\sqrt{242}}", "11\\sqrt{2}", EQ},
  {"roots", "\\boxed{\\sqrt[3]{27}}", "3", EQ},
  {"roots", "\\boxed{\\sqrt[3]{-8}}", "-2", EQ},
  {"roots", "\\boxed{\\sqrt[4]{16}}", "2", EQ},
  {"roots", "\\boxed{2^{1/3}}", "\\sqrt[3]{2}", EQ},
  {"roots", "\\boxed{\\sqrt{2}}", "1.41421356", EQ},
  {"roots", "\\boxed{1.4142}", "\\sqrt{2}", EQ},
  {"roots", "\\boxed{1.41}", "\\sqrt{2}", NE},  // 3e-3 relative error (was accepted by rounding)
  {"roots", "\\boxed{1.42}", "\\sqrt{2}", NE},
  {"roots", "\\boxed{\\sqrt{3}}", "\\sqrt{2}", NE},
  {"roots", "\\boxed{1+2\\sqrt{3}}", "2\\sqrt{3}+1", EQ},
  {"roots", "\\boxed{11\\sqrt{5}+11}", "11 \\sqrt{5} + 11", EQ},
  {"roots", "\\boxed{11(\\sqrt{5}+1)}", "11 \\sqrt{5} + 11", EQ},
  {"roots", "\\boxed{\\sqrt{51}}", "\\sqrt{53}", NE},
  {"roots", "\\boxed{\\sqrt{8}/2}", "\\sqrt{2}", EQ},
  {"roots", "\\boxed{\\frac{\\sqrt{21}}{5}}", "\\sqrt{\\frac{21}{25}}", EQ},
  {"roots", "\\boxed{sqrt(2)}", "\\sqrt{2}", EQ},
  {"roots", "\\boxed{\\sqrt{2}\\sqrt{3}}", "\\sqrt{6}", EQ},
  {"roots", "\\boxed{70\\sqrt{2}}", "70 \\sqrt{2}", EQ},
  {"roots", "\\boxed{3 \\pm 2\\sqrt{2}}", "3 \\pm 2 \\sqrt{2}", EQ},
  {"roots", "\\boxed{3 + 2\\sqrt{2}, 3 - 2\\sqrt{2}}", "3 \\pm 2 \\sqrt{2}", EQ},
  {"roots", "\\boxed{1-\\sqrt{19},1+\\sqrt{19}}", "1 \\pm \\sqrt{19}", EQ},
  {"roots", "\\boxed{1+\\sqrt{19}}", "1 \\pm \\sqrt{19}", NE},

  // --- powers
  {"powers", "\\boxed{2^{10}}", "1024", EQ},
  {"powers", "\\boxed{2^10}", "1024", EQ},
  {"powers", "\\boxed{10^{-2}}", "0.01", EQ},
  {"powers", "\\boxed{2^{-1}}", "\\frac12", EQ},
  {"powers", "\\boxed{(-2)^3}", "-8", EQ},
  {"powers", "\\boxed{-2^2}", "-4", EQ},
  {"powers", "\\boxed{(-2)^2}", "4", EQ},
  {"powers", "\\boxed{2^{3^2}}", "512", EQ},
  {"powers", "\\boxed{2^3^2}", "512", EQ},
  {"powers", "\\boxed{4^{3/2}}", "8", EQ},
  {"powers", "\\boxed{8^{2/3}}", "4", EQ},
  {"powers", "\\boxed{3^4}", "81", EQ},
  {"powers", "\\boxed{3^4}", "64", NE},
  {"powers", "\\boxed{x^2}", "x^3", NE},
  {"powers", "\\boxed{x^{2}}", "x*x", EQ},
  {"powers", "\\boxed{2^{100}}", "1267650600228229401496703205376", EQ},
  {"powers", "\\boxed{1.5 \\times 10^3}", "1500", EQ},
  {"powers", "\\boxed{6.72 \\cdot 10^{-5}}", "0.0000672", EQ},
  {"powers", "\\boxed{5r^5}", "5r^5", EQ},
  {"powers", "\\boxed{3R^2}", "3 R^{2}", EQ},
  {"powers", "\\boxed{3R^2}", "3r^2", NE},
  {"powers", "\\boxed{(\\sqrt{2})^2}", "2", EQ},
  {"powers", "\\boxed{2^{0.5}}", "\\sqrt{2}", EQ},
  {"powers", "\\boxed{0^0}", "1", NE},

  // --- pi and e
  {"pi_e", "\\boxed{2\\pi}", "2 \\pi", EQ},
  {"pi_e", "\\boxed{\\pi \\cdot 2}", "2\\pi", EQ},
  {"pi_e", "\\boxed{12\\pi}", "12 \\pi", EQ},
  {"pi_e", "\\boxed{6.2832}", "2\\pi", EQ},
  {"pi_e", "\\boxed{3.14}", "\\pi", NE},  // 5e-4 relative error (was accepted by rounding)
  {"pi_e", "\\boxed{3.1416}", "\\pi", EQ},
  {"pi_e", "\\boxed{3.15}", "\\pi", NE},
  {"pi_e", "\\boxed{3}", "\\pi", NE},
  {"pi_e", "\\boxed{\\frac{20000}{\\pi}}", "20000/\\pi", EQ},
  {"pi_e", "\\boxed{288\\pi}", "288 \\pi", EQ},
  {"pi_e", "\\boxed{18+2\\pi}", "2\\pi+18", EQ},
  {"pi_e", "\\boxed{\\frac{\\pi^2}{8}}", "\\pi^2/8", EQ},
  {"pi_e", "\\boxed{-\\frac{\\pi}{6}}", "-\\pi/6", EQ},
  {"pi_e", "\\boxed{\\frac{\\pi}{6}}", "-\\frac{\\pi}{6}", NE},
  {"pi_e", "\\boxed{e^2}", "e^{2}", EQ},
  {"pi_e", "\\boxed{e^{\\ln 5}}", "5", EQ},
  {"pi_e", "\\boxed{2.718}", "e", NE},  // 1.04e-4 relative error, just past the tolerance
  {"pi_e", "\\boxed{2.7183}", "e", EQ},
  {"pi_e", "\\boxed{0.50001}", "\\sin(\\frac{\\pi}{6})", NE},
  {"pi_e", "\\boxed{\\pi}", "pi", EQ},
  {"pi_e", "\\boxed{7\\pi}", "7\\pi", EQ},
  {"pi_e", "\\boxed{8\\pi}", "8 \\pi", EQ},
  {"pi_e", "\\boxed{\\pi r^2}", "r^2\\pi", EQ},

  // --- trigonometric and logarithmic functions
  {"trig_log", "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\sin(\\pi/3)", EQ},
  {"trig_log", "\\boxed{\\sin\\frac{\\pi}{3}}", "\\frac{\\sqrt3}{2}", EQ},
  {"trig_log", "\\boxed{\\cos(0)}", "1", EQ},
  {"trig_log", "\\boxed{\\cos 0}", "1", EQ},
  {"trig_log", "\\boxed{\\tan\\frac{\\pi}{4}}", "1", EQ},
  {"trig_log", "\\boxed{\\sin^2 x + \\cos^2 x}", "1", EQ},
  {"trig_log", "\\boxed{2\\sin x\\cos x}", "\\sin 2x", EQ},
  {"trig_log", "\\boxed{\\sin(2x)}", "2\\sin(x)\\cos(x)", EQ},
  {"trig_log", "\\boxed{\\cot x}", "\\frac{\\cos x}{\\sin x}", EQ},
  {"trig_log", "\\boxed{\\cot x}", "\\tan x", NE},
  {"trig_log", "\\boxed{\\sec x}", "1/\\cos x", EQ},
  {"trig_log", "\\boxed{\\ln 8}", "3\\ln 2", EQ},
  {"trig_log", "\\boxed{\\ln(8)}", "3\\ln{2}", EQ},
  {"trig_log", "\\boxed{\\log_2 8}", "3", EQ},
  {"trig_log", "\\boxed{\\log_{2}{8}}", "3", EQ},
  {"trig_log", "\\boxed{\\log_3 81}", "4", EQ},
  {"trig_log", "\\boxed{\\log_2 9}", "2\\log_2 3", EQ},
  {"trig_log", "\\boxed{\\exp(0)}", "1", EQ},
  {"trig_log", "\\boxed{\\exp(1)}", "e", EQ},
  {"trig_log", "\\boxed{\\arctan 1}", "\\frac{\\pi}{4}", EQ},
  {"trig_log", "\\boxed{\\sin^{-1}(1/2)}", "\\pi/6", EQ},
  {"trig_log", "\\boxed{\\arcsin(1)}", "\\frac{\\pi}{2}", EQ},
  {"trig_log", "\\boxed{\\operatorname{sin}(\\pi/6)}", "1/2", EQ},
  {"trig_log", "\\boxed{\\sin(30)}", "\\frac{1}{2}", NE},
  {"trig_log", "\\boxed{\\log 100}", "2\\log 10", EQ},
  {"trig_log", "\\boxed{\\cos\\left(\\frac{\\pi}{3}\\right)}", "0.5", EQ},
  {"trig_log", "\\boxed{-\\frac{24}{25}}", "\\cos(2\\arctan 7)", EQ},

  // --- factorials and binomials
  {"factorial_binomial", "\\boxed{5!}", "120", EQ},
  {"factorial_binomial", "\\boxed{0!}", "1", EQ},
  {"factorial_binomial", "\\boxed{\\frac{10!}{8!}}", "90", EQ},
  {"factorial_binomial", "\\boxed{3!4!}", "144", EQ},
  {"factorial_binomial", "\\boxed{6!}", "720", EQ},
  {"factorial_binomial", "\\boxed{5!}", "24", NE},
  {"factorial_binomial", "\\boxed{\\binom{5}{2}}", "10", EQ},
  {"factorial_binomial", "\\boxed{\\dbinom{10}{3}}", "120", EQ},
  {"factorial_binomial", "\\boxed{\\tbinom{6}{3}}", "20", EQ},
  {"factorial_binomial", "\\boxed{\\binom52}", "10", EQ},
  {"factorial_binomial", "\\boxed{\\binom{n}{2}}", "\\frac{n(n-1)}{2}", EQ},
  {"factorial_binomial", "\\boxed{\\binom{8}{4}/2}", "35", EQ},
  {"factorial_binomial", "\\boxed{\\frac{\\binom{4}{2}}{\\binom{8}{2}}}", "\\frac{3}{14}", EQ},
  {"factorial_binomial", "\\boxed{(3!)^2}", "36", EQ},
  {"factorial_binomial", "\\boxed{2\\cdot 5!}", "240", EQ},
  {"factorial_binomial", "\\boxed{20!}", "2432902008176640000", EQ},

  // --- implicit multiplication
  {"implicit", "\\boxed{2x}", "2*x", EQ},
  {"implicit", "\\boxed{2 x}", "x \\cdot 2", EQ},
  {"implicit", "\\boxed{2\\pi r}", "2 r \\pi", EQ},
  {"implicit", "\\boxed{3\\sqrt{2}}", "3*sqrt(2)", EQ},
  {"implicit", "\\boxed{(x+1)(x-1)}", "x^2-1", EQ},
  {"implicit", "\\boxed{(x+1)^2}", "x^2+2x+1", EQ},
  {"implicit", "\\boxed{x^2+2x+1}", "(x+1)^{2}", EQ},
  {"implicit", "\\boxed{(a+5)(b+2)}", "ab+2a+5b+10", EQ},
  {"implicit", "\\boxed{(a+5)(b+2)}", "(a+2)(b+5)", NE},
  {"implicit", "\\boxed{2k+2}", "2(k+1)", EQ},
  {"implicit", "\\boxed{2k}", "k+k", EQ},
  {"implicit", "\\boxed{-13x+3}", "3-13x", EQ},
  {"implicit", "\\boxed{15x-80}", "5(3x-16)", EQ},
  {"implicit", "\\boxed{6r^2-4r-24}", "2(3r^2-2r-12)", EQ},
  {"implicit", "\\boxed{8n^2+4n+1}", "8n^2 + 4n + 1", EQ},
  {"implicit", "\\boxed{x^5-x^4+x^3-x^2+x-1}", "(x-1)(x^4+x^2+1)", EQ},
  {"implicit", "\\boxed{x^3+3x-6}", "x^3 + 3x - 6", EQ},
  {"implicit", "\\boxed{\\frac{11+9a}{20}}", "\\frac{9a+11}{20}", EQ},
  {"implicit", "\\boxed{p-q}", "p - q", EQ},
  {"implicit", "\\boxed{q-p}", "p - q", NE},
  {"implicit", "\\boxed{2}", "2x", NE},
  {"implicit", "\\boxed{xy}", "yx", EQ},
  {"implicit", "\\boxed{2\\alpha}", "\\alpha+\\alpha", EQ},
  {"implicit", "\\boxed{x_1+x_2}", "x_2+x_1", EQ},
  {"implicit", "\\boxed{|x|}", "|x|", EQ},
  {"implicit", "\\boxed{|-3|}", "3", EQ},
  {"implicit", "\\boxed{\\frac{x}{2}}", "0.5x", EQ},
  {"implicit", "\\boxed{(x-1)^3}", "x^3-1", NE},
  {"implicit", "\\boxed{-2+7i}", "7i-2", EQ},
  {"implicit", "\\boxed{1-12i}", "1 - 12i", EQ},
  {"implicit", "\\boxed{6-5i}", "6+5i", NE},

  // --- equations
  {"equations", "\\boxed{5x-7y+11z+4=0}", "5x - 7y + 11z + 4 = 0", EQ},
  {"equations", "\\boxed{-5x+7y-11z-4=0}", "5x - 7y + 11z + 4 = 0", EQ},
  {"equations", "\\boxed{10x-14y+22z+8=0}", "5x - 7y + 11z + 4 = 0", EQ},
  {"equations", "\\boxed{5x-7y+11z=-4}", "5x - 7y + 11z + 4 = 0", EQ},
  {"equations", "\\boxed{5x-7y+11z+5=0}", "5x - 7y + 11z + 4 = 0", NE},
  {"equations", "\\boxed{y=-2x}", "y = -2x", EQ},
  // Until issue 42 a gold "y = -2x" lost its left side in normalization and this was not equal;
  // equivalent equations are equal now, as in Math-Verify.
  {"equations", "\\boxed{2x+y=0}", "y = -2x", EQ},
  {"equations", "\\boxed{2x+y=1}", "y = -2x", NE},
  {"equations", "\\boxed{x^2+y^2=4}", "y^2+x^2=4", EQ},
  {"equations", "\\boxed{x^2+y^2=4}", "x^2+y^2=2", NE},
  {"equations", "\\boxed{x=2}", "2", EQ},
  {"equations", "\\boxed{x=2}", "3", NE},
  {"equations", "\\boxed{y=x+1}", "x+1", EQ},

  // --- tuples, intervals, sets, lists
  {"structures", "\\boxed{(1,2)}", "(1,2)", EQ},
  {"structures", "\\boxed{(1, 2)}", "\\left( 1, 2 \\right)", EQ},
  {"structures", "\\boxed{(2,1)}", "(1,2)", NE},
  {"structures", "\\boxed{(1,2)}", "[1,2]", NE},
  {"structures", "\\boxed{[1,2)}", "[1,2]", NE},
  {"structures", "\\boxed{(1,2]}", "(1,2]", EQ},
  {"structures", "\\boxed{(3,4]}", "(3, 4]", EQ},
  {"structures", "\\boxed{(-1,6)}", "(-1,6)", EQ},
  {"structures", "\\boxed{(-1,6)}", "(-1,-6)", NE},
  {"structures", "\\boxed{(\\frac{3}{2},-13)}", "\\left( \\frac{3}{2}, -13 \\right)", EQ},
  {"structures", "\\boxed{(1.5,-13)}", "\\left( \\frac{3}{2}, -13 \\right)", EQ},
  {"structures", "\\boxed{(3,\\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", EQ},
  {"structures", "\\boxed{(1,-16,-4,43)}", "(1,-16,-4,43)", EQ},
  {"structures", "\\boxed{(1,-16,-4)}", "(1,-16,-4,43)", NE},
  {"structures", "\\boxed{(-\\infty, 0]}", "(-\\infty,0]", EQ},
  {"structures", "\\boxed{(-\\infty, 0)}", "(-\\infty,0]", NE},
  {"structures", "\\boxed{(2,\\infty)}", "(2, \\infty)", EQ},
  {"structures", "\\boxed{(2,+\\infty)}", "(2, \\infty)", EQ},
  {"structures", "\\boxed{(-\\infty,2)\\cup(3,\\infty)}", "(-\\infty, 2) \\cup (3, \\infty)", EQ},
  {"structures", "\\boxed{(3,\\infty)\\cup(-\\infty,2)}", "(-\\infty, 2) \\cup (3, \\infty)", EQ},
  {"structures", "\\boxed{(-\\infty,2]\\cup(3,\\infty)}", "(-\\infty, 2) \\cup (3, \\infty)", NE},
  {"structures", "\\boxed{(0,9)\\cup(9,36)}", "(0,9) \\cup (9,36)", EQ},
  {"structures", "\\boxed{(-\\sqrt{3},\\sqrt{3})}", "(-\\sqrt{3}, \\sqrt{3})", EQ},
  {"structures", "\\boxed{\\left(\\frac{3}{5},\\frac{8}{3}\\right]}", "(0.6, 8/3]", EQ},
  {"structures", "\\boxed{[\\frac{\\pi^2}{8},\\frac{5\\pi^2}{4}]}", "\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", EQ},
  {"structures", "\\boxed{\\{1,2,3\\}}", "\\{3,2,1\\}", EQ},
  {"structures", "\\boxed{\\{1,2\\}}", "\\{1,2,3\\}", NE},
  {"structures", "\\boxed{\\{1\\pm\\sqrt{5},-2\\}}", "\\{1\\pm\\sqrt{5},-2\\}", EQ},
  {"structures", "\\boxed{-2, 1}", "-2,1", EQ},
  {"structures", "\\boxed{1, -2}", "-2,1", EQ},
  {"structures", "\\boxed{1, 2}", "-2,1", NE},
  {"structures", "\\boxed{3, 5, 7}", "3, 5, 7", EQ},
  {"structures", "\\boxed{7, 3, 5}", "3, 5, 7", EQ},
  {"structures", "\\boxed{\\{3,5,7\\}}", "3, 5, 7", EQ},
  {"structures", "\\boxed{3 and 5}", "3, 5", EQ},
  {"structures", "\\boxed{x=3, x=5}", "3, 5", EQ},
  {"structures", "\\boxed{\\{5\\}}", "5", EQ},
  {"structures", "\\boxed{1,2}", "(1,2)", EQ},
  {"structures", "\\boxed{2,1}", "(1,2)", NE},
  {"structures", "\\boxed{(1,2)}", "1,2", NE},
  {"structures", "\\boxed{5}", "(1,5)", NE},
  {"structures", "\\boxed{[1,2]}", "[1,2]", EQ},
  {"structures", "\\boxed{[0.5,1]}", "[\\frac12, 1]", EQ},
  {"structures", "\\boxed{\\infty}", "\\infty", EQ},
  {"structures", "\\boxed{-\\infty}", "\\infty", NE},
  {"structures", "\\boxed{(6,31,-1)}", "(6,31,-1)", EQ},
  {"structures", "\\boxed{(15,-29)}", "(15, -29)", EQ},

  // --- multiple-choice letters and words
  {"letters", "\\boxed{B}", "B", EQ},
  {"letters", "\\boxed{(B)}", "B", EQ},
  {"letters", "\\boxed{\\text{(B)}}", "B", EQ},
  {"letters", "\\boxed{B}", "\\text{(B)}", EQ},
  {"letters", "\\boxed{\\textbf{(B)}}", "\\text{(B)}", EQ},
  {"letters", "\\boxed{(B) 12}", "B", EQ},
  {"letters", "\\boxed{C}", "\\text{(C)}", EQ},
  {"letters", "\\boxed{C}", "\\text{(E)}", NE},
  {"letters", "\\boxed{(A)}", "B", NE},
  {"letters", "\\boxed{\\text{E}}", "\\text{(E)}", EQ},
  {"letters", "\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", EQ},
  {"letters", "\\boxed{Evelyn}", "\\text{Evelyn}", EQ},
  {"letters", "\\boxed{evelyn}", "\\text{Evelyn}", EQ},
  {"letters", "\\boxed{\\text{Navin}}", "\\text{Evelyn}", NE},
  {"letters", "\\boxed{\\text{east}}", "\\text{east}", EQ},
  {"letters", "\\boxed{\\text{west}}", "\\text{east}", NE},
  {"letters", "\\boxed{\\text{even}}", "\\text{even}", EQ},
  {"letters", "\\boxed{\\text{odd}}", "\\text{even}", NE},
  {"letters", "\\boxed{ellipse}", "\\text{ellipse}", EQ},
  // Yes/no and word answers: letter case and \text / \textbf / \mathrm wrappers do not matter.
  {"letters", "\\boxed{\\text{yes}}", "Yes", EQ},
  {"letters", "\\boxed{YES}", "\\text{Yes}", EQ},
  {"letters", "\\boxed{\\textbf{No}}", "no", EQ},
  {"letters", "\\boxed{\\mathrm{no}}", "\\text{No}", EQ},
  {"letters", "\\boxed{\\text{No}}", "Yes", NE},
  {"letters", "\\boxed{\\text{yes}}", "\\text{No}", NE},
  {"letters", "\\boxed{\\text{No solution}}", "\\text{no solution}", EQ},
  {"letters", "\\boxed{(c)}", "\\text{(C)}", EQ},
  {"letters", "\\boxed{\\textbf{(c)}}", "C", EQ},
  {"letters", "\\boxed{(d)}", "\\text{(C)}", NE},
  {"letters", "\\boxed{ab}", "AB", NE},

  // --- matrices and vectors
  {"matrices", "\\boxed{\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{bmatrix}-1&0\\\\0&-1\\end{bmatrix}}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix}-1&0\\\\0&1\\end{pmatrix}}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", NE},
  {"matrices", "\\boxed{\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\\\ \\frac{5}{3} \\end{pmatrix}}", "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}}", "\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}}", "\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix} -18 \\\\ 96 \\\\ -49 \\end{pmatrix}}", "\\begin{pmatrix} -18 \\\\ -49 \\\\ 96 \\end{pmatrix}", NE},
  {"matrices", "\\boxed{(-7,16,5)}", "\\begin{pmatrix} -7 \\\\ 16 \\\\ 5 \\end{pmatrix}", EQ},
  {"matrices", "\\boxed{\\begin{pmatrix} -2 \\\\ -14 \\end{pmatrix}}", "\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}", NE},
  {"matrices", "\\boxed{\\begin{pmatrix} 16/49 \\\\ 48/49 \\\\ 24/49 \\end{pmatrix}}", "\\begin{pmatrix} \\frac{16}{49} \\\\ \\frac{48}{49} \\\\ \\frac{24}{49} \\end{pmatrix}", EQ},

  // --- based numerals (kept as symbols: 204_5 is not 54)
  {"bases", "\\boxed{204_5}", "204_5", EQ},
  {"bases", "\\boxed{4210_{5}}", "4210_5", EQ},
  {"bases", "\\boxed{204_6}", "204_5", NE},
  {"bases", "\\boxed{54}", "204_5", NE},

  // --- things that must NOT be equal
  {"negatives", "\\boxed{0.5}", "5", NE},
  {"negatives", "\\boxed{5}", "50", NE},
  {"negatives", "\\boxed{-5}", "5", NE},
  {"negatives", "\\boxed{2}", "2x", NE},
  {"negatives", "\\boxed{x}", "y", NE},
  {"negatives", "\\boxed{x+1}", "x-1", NE},
  {"negatives", "\\boxed{1}", "-1", NE},
  {"negatives", "\\boxed{100}", "1000", NE},
  {"negatives", "\\boxed{1001}", "1000", NE},
  {"negatives", "\\boxed{999.9}", "1000", NE},
  {"negatives", "\\boxed{\\frac{2}{1}}", "\\frac{1}{2}", NE},
  {"negatives", "\\boxed{\\sqrt{2}}", "2", NE},
  {"negatives", "\\boxed{2\\pi}", "\\pi", NE},
  {"negatives", "\\boxed{e}", "\\pi", NE},
  {"negatives", "\\boxed{1.0001}", "1", NE},
  {"negatives", "\\boxed{123456789}", "123456788", NE},
  {"negatives", "\\boxed{10^{20}+1}", "10^{20}", NE},
  {"negatives", "\\boxed{0}", "0.001", NE},
  {"negatives", "\\boxed{x^2}", "2x", NE},
  {"negatives", "\\boxed{\\frac{1}{x}}", "x", NE},
  {"negatives", "No number here at all.", "5", UP},
  {"negatives", "\\boxed{41}", "14", NE},
  {"negatives", "\\boxed{2,3}", "2,3,4", NE},
  {"negatives", "\\boxed{(1,2,3)}", "(1,2)", NE},
  {"negatives", "\\boxed{\\{1,1,2\\}}", "\\{1,2,2\\}", NE},
  {"negatives", "The final answer is $\\text{(C)}+1$.", "\\text{(C)}", NE},
  {"negatives", "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}+1}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", UP},
  {"negatives", "\\boxed{\\frac{1}{2}+1}", "\\frac{1}{2}", NE},
  {"negatives", "\\boxed{(1,2)+1}", "(1,2)", UP},

  // --- issue 42: answers without a box (the last math span, a "Final Answer" heading, short text)
  {"no-box", "Since $x=2$, we get $\\frac13$.", "\\frac{1}{3}", EQ},
  {"no-box", "Therefore the range is $[0,1)$.", "[0,1)", EQ},
  {"no-box", "Therefore the range is $[0,1)$.", "[0,1]", NE},
  {"no-box", "The correct option is $\\text{E}$", "\\text{E}", EQ},
  {"no-box", "So\n\\[ 2\\sqrt{3} \\]", "\\sqrt{12}", EQ},
  {"no-box", "Hence \\(-\\frac{3}{2}\\).", "-1.5", EQ},
  {"no-box", "Thus $$\\frac{\\pi}{4}$$", "\\pi/4", EQ},
  {"no-box", "**Final Answer**\n\\[\n(1, -2)\n\\]", "(1,-2)", EQ},
  {"no-box", "The final answer is:\n\n$$7$$", "7", EQ},
  {"no-box", "1/3", "\\frac{1}{3}", EQ},
  {"no-box", "$-\\frac{5}{2}$", "-2.5", EQ},
  // A number after the last span is the later answer; money is not a span.
  {"no-box", "We get $\\frac{1}{3}$, about 0.33 in total, so 0.25.", "0.25", EQ},
  {"no-box", "He paid $5 and got $3 back, so 2 dollars remain", "2", EQ},
  {"no-box", "Tickets cost $4 each, so $12 in all.", "12", EQ},
  // --- issue 42: several boxes, assignments, chains, equivalent equations
  {"several-boxes", "The roots are $\\boxed{1}$ and $\\boxed{-2}$.", "-2, 1", EQ},
  {"several-boxes", "So $x = \\boxed{-2}$ or $x = \\boxed{6}$.", "6, -2", EQ},
  {"several-boxes", "The roots are $\\boxed{1}$ and $\\boxed{-2}$.", "1", NE},
  {"several-boxes", "$\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$ inches", "\\frac{639}{40}", EQ},
  {"several-boxes", "First \\boxed{3}. Then, correcting, \\boxed{4}", "4", EQ},
  {"assignments", "\\boxed{(3,2)}", "(p,q)=(3,2)", EQ},
  {"assignments", "\\boxed{(2,3)}", "(p,q)=(3,2)", NE},
  {"assignments", "\\boxed{(p, q) = (3, 2)}", "(p,q)=(3,2)", EQ},
  {"assignments", "\\boxed{x = 2+3 = 5}", "5", EQ},
  {"assignments", "\\boxed{x = 2+3 = 6}", "5", NE},
  {"assignments", "\\boxed{26+1=27}", "27", EQ},
  {"assignments", "\\boxed{2x+1=5}", "5", NE},
  {"assignments", "\\boxed{2x+1}", "y = 2x + 1", EQ},
  {"assignments", "\\boxed{x = 2, 1}", "1, 2", EQ},
  {"assignments", "\\boxed{2x - y + 1 = 0}", "y = 2x + 1", EQ},
  {"assignments", "\\boxed{2y = 4x + 2}", "y = 2x + 1", EQ},
  {"assignments", "\\boxed{y = 2x - 1}", "y = 2x + 1", NE},
  // --- issue 42: inequalities as intervals
  {"inequalities", "\\boxed{x >= 5}", "x \\geq 5", EQ},
  {"inequalities", "\\boxed{5 \\le x}", "x \\geq 5", EQ},
  {"inequalities", "\\boxed{[5, \\infty)}", "x \\geq 5", EQ},
  {"inequalities", "\\boxed{x \\geq 5}", "[5,\\infty)", EQ},
  {"inequalities", "\\boxed{x > 5}", "x \\geq 5", NE},
  {"inequalities", "\\boxed{(5, \\infty)}", "x \\geq 5", NE},
  {"inequalities", "\\boxed{0 < f(x) < 1}", "(0,1)", EQ},
  {"inequalities", "\\boxed{1 > x > 0}", "0 < x < 1", EQ},
  {"inequalities", "\\boxed{0 \\le x < 1}", "0 < x < 1", NE},
  {"inequalities", "\\boxed{(-\\infty, -6)}", "x < -6", EQ},
  {"inequalities", "\\boxed{|x| < 3}", "x < 3", UP},  // |x| is not a subject: not an interval
  // --- issue 42: units, text wrappers and number formats
  {"formats", "\\boxed{12\\textnormal{ miles}}", "12", EQ},
  {"formats", "\\boxed{28 pct}", "28\\%", EQ},
  {"formats", "\\boxed{1 000}", "1000", EQ},
  {"formats", "\\boxed{1\\,000}", "1000", EQ},
  {"formats", "\\boxed{\\\\frac{3}{7}}", "\\frac37", EQ},
  {"formats", "\\boxed{\\\\left(1, 2\\\\right]}", "(1,2]", EQ},
  {"formats", "\\boxed{x \\\\le 3}", "x \\le 3", EQ},
  {"formats", "\\boxed{x \\\\ge 3}", "x \\le 3", NE},

  // --- GSM8K-style completions
  {"gsm8k", "Janet has 16 - 3 - 4 = 9 eggs.\n9 * 2 = 18\nThe answer is 18.", "18", EQ},
  {"gsm8k", "So he earns $70,000 in profit.", "70000", EQ},
  {"gsm8k", "The total is 3.50 dollars.", "3.5", EQ},
  {"gsm8k", "It takes 3 bolts.\n#### 3", "3", EQ},
  {"gsm8k", "The answer is $\\boxed{540}$ meters.", "540", EQ},
  {"gsm8k", "In total 20 + 5 = 25, so 25 people.", "26", NE},
  {"gsm8k", "He pays 1,2 and then 3", "3", EQ},
  {"gsm8k", "The percentage is 25%.", "25", EQ},
};
// clang-format on

}  // namespace

TEST_CASE("the grading table: every case gets its expected verdict", "[grader]") {
  REQUIRE(kCases.size() >= 300);
  int failures = 0;
  for (const auto& c : kCases) {
    auto result = rqat::eval::grade(c.prediction, c.gold);
    if (result.kind != c.expected) {
      ++failures;
      UNSCOPED_INFO("[" << c.group << "] prediction=" << c.prediction << " gold=" << c.gold
                        << " expected " << rqat::eval::to_string(c.expected) << " got "
                        << rqat::eval::to_string(result.kind)
                        << " (extracted: " << result.prediction_answer << ")");
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("the table is symmetric where it should be: equal pairs stay equal when swapped",
          "[grader]") {
  GradeOptions options;
  options.extract_prediction = false;
  int failures = 0;
  for (const auto& c : kCases) {
    if (c.expected != EQ) continue;
    auto p = rqat::eval::last_boxed(c.prediction);
    if (!p) continue;
    std::string group = c.group;
    // Bare lists against tuples and units written only on one side are one-directional by design.
    if (group == "structures" || group == "letters" || group == "extraction" ||
        group == "several-boxes" || group == "no-box")
      continue;
    auto swapped = rqat::eval::grade(c.gold, *p, options);
    if (swapped.kind != EQ) {
      ++failures;
      UNSCOPED_INFO("swapped: " << c.gold << " vs " << *p << " got "
                                << rqat::eval::to_string(swapped.kind));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("extraction helpers", "[grader][extraction]") {
  using namespace rqat::eval;
  CHECK(last_boxed("a \\boxed{\\frac{1}{\\sqrt{2}}} b") == "\\frac{1}{\\sqrt{2}}");
  CHECK(last_boxed("\\boxed{1} \\boxed{2}") == "2");
  CHECK(last_boxed("\\boxed{1} \\boxed{2") == "1");
  CHECK(!last_boxed("no box"));
  CHECK(last_boxed("$\\boxed 7$") == "7");
  CHECK(gsm8k_gold("blah\n#### 1,200") == "1200");
  CHECK(!gsm8k_gold("no hashes"));
  CHECK(last_number("it is 1,234.5 units") == "1234.5");
  CHECK(last_number("x = -3") == "-3");
  CHECK(last_number("from 2 to 5.") == "5");
  CHECK(!last_number("none"));
  CHECK(strip_thinking("<think>a</think>b") == "b");
  CHECK(strip_thinking("<think>a b") == "<think>a b");
  CHECK(answer_phrase("so the final answer is $\\frac{1}{2}$.\nDone") == "\\frac{1}{2}");
  CHECK(extract_answer("<think>\\boxed{1}</think> no box, answer: 2") == "2");
}

TEST_CASE("extraction priority: boxes, phrases, the last math span, short text, the last number",
          "[grader][extraction]") {
  using namespace rqat::eval;
  CHECK(final_boxes("The roots are $\\boxed{1}$ and $\\boxed{2}$.") == "1, 2");
  CHECK(final_boxes("$x = \\boxed{-2}$ or $x = \\boxed{6}$") == "-2, 6");
  CHECK(final_boxes("\\boxed{1}, then \\boxed{2}") == "2");
  CHECK(final_boxes("\\boxed{1}. \\boxed{2}") == "2");
  CHECK(extract_answer("The answer is 5.\nWe also saw $7$") == "5");  // a phrase before a math span
  CHECK(extract_answer("We get $\\frac13$.") == "\\frac13");
  CHECK(extract_answer("We get $\\frac13$ and 5 apples") == "5");  // a number after the span
  CHECK(extract_answer("1/3") == "1/3");
  CHECK(extract_answer("She has 7 apples") == "7");  // prose: not a short answer
  CHECK(extract_answer("#### 27") == "27");           // a marker: not a short answer
  CHECK(extract_answer("**Final Answer**\n\\[\n\\frac{1}{2}\n\\]") == "\\frac{1}{2}");
  CHECK(extract_answer("so the final answer is:\n$$4$$") == "4");
  CHECK(!last_math_span("it cost $5 and then $6"));     // money, not math
  CHECK(!last_math_span("it cost \\$5 and \\$6"));      // escaped dollars
  CHECK(last_math_span("so \\(x^2\\) and \\[y\\]") == "y");
  CHECK(last_math_span("a $1$ b $$2$$ c") == "2");
  CHECK(!short_answer_text(std::string(60, '1')));
  CHECK(!short_answer_text("the answer"));
}

TEST_CASE("inequalities read as intervals, and answers with '='", "[grader][forms]") {
  using namespace rqat::eval;
  CHECK(inequality_as_interval("x\\geq5") == "[5,\\infty)");
  CHECK(inequality_as_interval("5\\le x") == "[5,\\infty)");
  CHECK(inequality_as_interval("x<-6") == "(-\\infty,-6)");
  CHECK(inequality_as_interval("-1<x\\le6") == "(-1,6]");
  CHECK(inequality_as_interval("6>x>-1") == "(-1,6)");
  CHECK(inequality_as_interval("0<f(x)<1") == "(0,1)");
  CHECK(!inequality_as_interval("x<y"));    // two subjects
  CHECK(!inequality_as_interval("1<x>2"));  // not one direction
  CHECK(!inequality_as_interval("|x|<3"));  // not a variable
  CHECK(!inequality_as_interval("x=5"));

  auto chain = equation_form("x=2+3=5");
  REQUIRE(chain);
  CHECK(chain->assignment);
  CHECK(equation_value(*chain) == "5");
  auto tuple = equation_form("(p,q)=(3,2)");
  REQUIRE(tuple);
  CHECK(tuple->assignment);
  CHECK(equation_value(*tuple) == "(3,2)");
  auto equation = equation_form("2x+1=5");
  REQUIRE(equation);
  CHECK(!equation->assignment);
  CHECK(!equation_value(*equation));
  CHECK(equation_value(*equation_form("26+1=27")) == "27");
  CHECK(!equation_form("x=1,y=2"));  // a list of assignments
  CHECK(!equation_form("x<=5"));
  CHECK(!equation_form("5"));
}

TEST_CASE("Minerva's closing line yields its answer", "[grader][extraction]") {
  using rqat::eval::extract_answer;
  CHECK(extract_answer("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.") ==
        "\\frac{1}{2}");
  CHECK(extract_answer("Final Answer: The final answer is 7. I hope it is correct.") == "7");
  CHECK(extract_answer("Final Answer: The final answer is $y = 2x$.  I Hope It Is Correct.\n") ==
        "y = 2x");
  // Several math spans after the phrase stay one answer (a list), as before.
  CHECK(extract_answer("The answer is $2$ and $3$.") == "2$ and $3");
}

TEST_CASE("decimal approximations: relative error at most 1e-4, boundary included",
          "[grader][decimal]") {
  auto kind = [](const char* prediction, const char* gold) {
    return rqat::eval::grade(prediction, gold).kind;
  };
  // |0.3333 - 1/3| / (1/3) and |0.6666 - 2/3| / (2/3) are exactly 1e-4 (compared as rationals).
  CHECK(kind("\\boxed{0.3333}", "\\frac13") == EQ);
  CHECK(kind("\\boxed{0.6666}", "\\frac23") == EQ);
  CHECK(kind("\\boxed{0.33329}", "\\frac13") == NE);  // 1.3e-4
  CHECK(kind("\\boxed{0.66659}", "\\frac23") == NE);  // 1.15e-4
  CHECK(kind("\\boxed{0.333}", "\\frac13") == NE);
  CHECK(kind("\\boxed{0.33}", "\\frac13") == NE);
  CHECK(kind("\\boxed{-0.3333}", "-\\frac13") == EQ);
  CHECK(kind("\\boxed{-0.3333}", "\\frac13") == NE);
  // A value the literal could write exactly must be written exactly.
  CHECK(kind("\\boxed{1.0001}", "1") == NE);
  CHECK(kind("\\boxed{999.9}", "1000") == NE);
  CHECK(kind("\\boxed{0.12501}", "\\frac18") == NE);
  // Irrational values: the same tolerance, in 50-digit arithmetic.
  CHECK(kind("\\boxed{1.4142}", "\\sqrt2") == EQ);
  CHECK(kind("\\boxed{1.414}", "\\sqrt2") == NE);  // 1.5e-4
  CHECK(kind("\\boxed{3.1416}", "\\pi") == EQ);
  CHECK(kind("\\boxed{3.142}", "\\pi") == NE);  // 1.3e-4
}

TEST_CASE("normalization rules", "[grader][normalize]") {
  using rqat::eval::normalize_answer;
  CHECK(normalize_answer("\\text{(B)}") == "(B)");
  CHECK(normalize_answer("\\dfrac{1}{2}") == "\\frac{1}{2}");
  CHECK(normalize_answer("\\frac12") == "\\frac{1}{2}");
  CHECK(normalize_answer("\\sqrt2") == "\\sqrt{2}");
  CHECK(normalize_answer("10,\\!080") == "10080");
  CHECK(normalize_answer("(1,2)") == "(1,2)");
  CHECK(normalize_answer("1,000") == "1000");
  CHECK(normalize_answer("x = 5.") == "5");
  CHECK(normalize_answer(".5") == "0.5");
  CHECK(normalize_answer("\\left( 3, \\frac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})");
  CHECK(normalize_answer("15\\mbox{ cm}^2") == "15");
  CHECK(normalize_answer("50\\%") == "50");
  CHECK(normalize_answer("90^\\circ") == "90");
  CHECK(normalize_answer("\\$18.90") == "18.90");
  CHECK(normalize_answer("\\cot x") == "\\cot x");
}

TEST_CASE("pathological inputs return quickly", "[grader][timeout]") {
  GradeOptions options;
  options.timeout = std::chrono::milliseconds(500);
  auto timed = [&](const std::string& prediction, const std::string& gold) {
    auto start = std::chrono::steady_clock::now();
    auto result = rqat::eval::grade(prediction, gold, options);
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < 2.0);
    CHECK(result.kind != GradeKind::equal);
    return result.kind;
  };
  timed("\\boxed{9^{9^{9}}}", "5");
  timed("\\boxed{9^9^9^9}", "5");
  timed("\\boxed{(10^9)!}", "5");
  timed("\\boxed{1000000000!}", "5");
  timed("\\boxed{\\binom{10^9}{10^8}}", "5");
  timed("\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "3");
  timed("\\boxed{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}", "1");
  timed("\\boxed{" + std::string(100000, '1') + "}", "1");
  std::string long_sum = "\\boxed{";
  for (int i = 0; i < 3000; ++i) long_sum += "\\sin(x)+";
  long_sum += "1}";
  timed(long_sum, "x");
  // A big exact power is still computed exactly when it fits.
  CHECK(rqat::eval::grade("\\boxed{2^{1000}}", "2^{1000}").kind == EQ);
  CHECK(rqat::eval::grade("\\boxed{2^{1000}}", "4^{500}").kind == EQ);
  CHECK(rqat::eval::grade("\\boxed{2^{1000}+1}", "4^{500}").kind == NE);
}

TEST_CASE("an exhausted budget reports timeout", "[grader][timeout]") {
  GradeOptions options;
  options.timeout = std::chrono::milliseconds(0);
  std::string sum = "\\boxed{";
  for (int i = 0; i < 2000; ++i) sum += "x^2+";
  sum += "1}";
  CHECK(rqat::eval::grade(sum, "x+1", options).kind == GradeKind::timeout);
}

TEST_CASE("unparseable predictions are counted separately, never equal", "[grader][unparseable]") {
  auto kind = [](const char* prediction, const char* gold) {
    return rqat::eval::grade(prediction, gold).kind;
  };
  CHECK(kind("I do not know.", "5") == UP);
  CHECK(kind("", "5") == UP);
  CHECK(kind("\\boxed{\\unknowncommand{3}}", "3") == UP);
  CHECK(kind("\\boxed{3 +}", "3") == UP);
  CHECK(kind("\\boxed{((3)}", "3") == UP);
  CHECK(kind("\\boxed{@#}", "3") == UP);
  CHECK(kind("\\boxed{(1, @)}", "(1,2)") == UP);
  CHECK(kind("\\boxed{\\frac{1}{}}", "1") == UP);
}

TEST_CASE("grade_batch matches grade, with many threads", "[grader][batch]") {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int rep = 0; rep < 5; ++rep)
    for (const auto& c : kCases) pairs.emplace_back(c.prediction, c.gold);
  auto serial = rqat::eval::grade_batch(pairs, 1);
  auto parallel = rqat::eval::grade_batch(pairs, 8);
  REQUIRE(serial.size() == pairs.size());
  REQUIRE(parallel.size() == pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    REQUIRE(serial[i].kind == parallel[i].kind);
    REQUIRE(serial[i].kind == kCases[i % kCases.size()].expected);
  }
}

TEST_CASE("last_boxed skips thousands of unclosed boxes in one pass", "[extract]") {
  // A degenerate rollout: an answer, then 30,000 "\boxed{" that never close. Each unclosed box
  // used to rescan the rest of the text (7.6 s here); the result is the closed box either way.
  std::string text = "so the answer is \\boxed{7}. ";
  for (int i = 0; i < 30000; ++i) text += "\\boxed{x ";
  CHECK(rqat::eval::last_boxed(text) == std::optional<std::string>("7"));
  CHECK(rqat::eval::last_boxed("\\boxed{1} \\boxed{2 \\boxed{3}") ==
        std::optional<std::string>("3"));
  CHECK(rqat::eval::last_boxed("\\boxed{1} \\boxed{2 {\\boxed{3}") ==
        std::optional<std::string>("3"));
  CHECK(rqat::eval::last_boxed("\\boxed{1} \\boxed{ {2}") == std::optional<std::string>("1"));
  CHECK_FALSE(rqat::eval::last_boxed("\\boxed{2 \\boxed{3").has_value());
}
