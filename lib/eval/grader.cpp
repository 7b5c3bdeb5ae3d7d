// Grader: string equality after normalization first, then multiple-choice letters and words, then
// structure (tuples, intervals, sets, lists, matrices, unions) element by element, then values.
#include "eval/grader.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "eval/answer_extraction.h"
#include "eval/answer_structure.h"
#include "eval/equation_form.h"
#include "eval/expression.h"
#include "eval/inequality.h"
#include "eval/latex_parser.h"
#include "eval/normalize.h"

namespace rqat::eval {

namespace mp = boost::multiprecision;

namespace {

enum class Cmp { equal, not_equal, unparseable };

struct Context {
  Budget& budget;
  const GradeOptions& options;
  int structure_depth = 0;  // compare_normalized calls in progress (tuples inside tuples ...)
};

// Normalization scans the text many times: charged to the budget like extraction.
std::string normalized(std::string_view text, Context& ctx) {
  ctx.budget.scan(text.size());
  return normalize_answer(text);
}

Cmp compare_normalized(const std::string& p, const std::string& g, Context& ctx);

bool is_choice(char c) { return c >= 'A' && c <= 'E'; }

// "B", "(B)", "B)" -> 'B' for answer choices A-E.
std::optional<char> choice_letter(std::string_view s) {
  if (s.size() == 1 && is_choice(s[0])) return s[0];
  if (s.size() == 3 && s[0] == '(' && s[2] == ')' && is_choice(s[1])) return s[1];
  if (s.size() == 2 && s[1] == ')' && is_choice(s[0])) return s[0];
  return std::nullopt;
}

// A prediction's choice against a choice gold: "(B) 12" (it opens with its choice) counts, and so
// does a lowercase "(b)" or "b" (against a letter gold a letter is a choice, not a variable).
std::optional<char> leading_choice(std::string_view s) {
  std::string upper(s.substr(0, 3));
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s.size() <= 3) return choice_letter(upper);
  if (upper[0] == '(' && upper[2] == ')' && is_choice(upper[1]) &&
      (std::isalnum(static_cast<unsigned char>(s[3])) || s[3] == ':' || s[3] == '\\'))
    return upper[1];
  return std::nullopt;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A plain word of three or more letters ("even", "Evelyn", "Yes") or the answer "no": compared as
// text, case-insensitively, not as a product of variables. Other two-letter answers stay products
// ("ab" is a*b, and "Ab" differs from it).
bool is_word(std::string_view s) {
  if (s.size() < 3 && lower(s) != "no") return false;
  for (char c : s)
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != ' ') return false;
  static const std::set<std::string, std::less<>> kMath = {"pi",  "sin", "cos", "tan", "cot", "sec",
                                                           "csc", "log", "ln",  "exp", "sqrt"};
  for (const auto& f : kMath)
    if (s.rfind(f, 0) == 0) return false;
  return true;
}

bool close(const Real& a, const Real& b, double tol) {
  if (mp::isinf(a) || mp::isinf(b)) return mp::isinf(a) && mp::isinf(b) && (a > 0) == (b > 0);
  Real diff = mp::abs(a - b);
  if (diff <= Real("1e-30")) return true;
  return diff <= Real(tol) * std::max(mp::abs(a), mp::abs(b));
}

// Decimal approximations (docs/grading.md, 5.4). A decimal literal stands for a value it cannot
// write exactly (a repeating fraction or an irrational number) when its relative error is at most
// 1e-4, the tolerance of Qwen2.5-Math's grader; as a rational the boundary is exact: 0.3333 is
// accepted for 1/3 (error exactly 1e-4), 0.333 and 0.33 are not. A value the literal's places can
// write exactly must be written exactly (1.0001 is not 1, 0.75001 is not 3/4).
const Rational kDecimalTolerance(1, 10'000);
constexpr size_t kMaxDecimalLiteral = 60;

struct DecimalLiteral {
  Rational value;
  int places = 0;  // digits after the point
};

// "-0.3333" -> {-3333/10000, 4}; nullopt for anything but a plain decimal with a point.
std::optional<DecimalLiteral> decimal_literal(std::string_view text) {
  std::string_view s = text;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  const size_t point = s.find('.');
  if (point == std::string_view::npos || point + 1 >= s.size() || s.size() > kMaxDecimalLiteral)
    return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == point) continue;
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    if (!digits.empty() || s[i] != '0') digits += s[i];  // cpp_int reads a leading 0 as octal
  }
  DecimalLiteral literal;
  literal.places = static_cast<int>(s.size() - point - 1);
  literal.value = Rational(mp::cpp_int(digits.empty() ? "0" : digits),
                           mp::pow(mp::cpp_int(10), static_cast<unsigned>(literal.places)));
  if (negative) literal.value = -literal.value;
  return literal;
}

// True when v has no finite decimal expansion: its reduced denominator does not divide a power
// of ten (10^bits suffices, since a denominator 2^a 5^b has a, b below its bit length).
bool repeats_forever(const Rational& v) {
  const mp::cpp_int& d = mp::denominator(v);
  if (d == 1) return false;
  return mp::powm(mp::cpp_int(10), mp::msb(d) + 1, d) != 0;
}

bool approximates(const DecimalLiteral& literal, const Rational& value) {
  if (!repeats_forever(value)) return false;
  return mp::abs(literal.value - value) <= kDecimalTolerance * mp::abs(value);
}

// The numeric counterpart for irrational values (pi, sqrt 2, sin 1): a value that the literal's
// places would write exactly (sin(pi/6) = 0.5) must be written exactly.
bool approximates(const DecimalLiteral& literal, const Real& value) {
  if (!mp::isfinite(value) || value == 0) return false;
  const Real scaled = value * mp::pow(Real(10), literal.places);
  if (mp::abs(scaled - mp::round(scaled)) <=
      Real("1e-30") * std::max(Real(1), Real(mp::abs(scaled))))
    return false;
  return mp::abs(to_real(literal.value) - value) <= to_real(kDecimalTolerance) * mp::abs(value);
}

// Either side written as a decimal approximation of the other's value.
template <class Value>
bool either_approximates(const std::string& ptext, const Value& pvalue, const std::string& gtext,
                         const Value& gvalue) {
  auto p = decimal_literal(ptext);
  auto g = decimal_literal(gtext);
  return (p && approximates(*p, gvalue)) || (g && approximates(*g, pvalue));
}

std::optional<Real> numeric_safe(const Expr& e, const Env& env, Budget& budget) {
  try {
    return evaluate_numeric(e, env, budget);
  } catch (const Timeout&) {
    throw;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<Rational> exact_safe(const Expr& e, Budget& budget) {
  try {
    return evaluate_exact(e, budget);
  } catch (const Timeout&) {
    throw;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<Env> sample_points(const std::set<std::string>& vars, Context& ctx) {
  std::mt19937_64 rng(ctx.options.seed);
  std::uniform_real_distribution<double> dist(0.3, 2.9);
  std::vector<Env> points;
  for (int k = 0; k < ctx.options.random_points; ++k) {
    Env env;
    for (const auto& v : vars) env[v] = Real(dist(rng));
    points.push_back(std::move(env));
  }
  return points;
}

ExprPtr difference(const Expr& equation) {
  return make_node(Kind::add, {equation.args[0], make_node(Kind::neg, {equation.args[1]})});
}

// Two equations are equal when lhs - rhs of one is a fixed nonzero multiple of the other's.
Cmp compare_equations(const Expr& p, const Expr& g, Context& ctx) {
  ExprPtr dp = difference(p);
  ExprPtr dg = difference(g);
  std::set<std::string> vars;
  collect_variables(*dp, vars);
  collect_variables(*dg, vars);
  std::optional<Real> ratio;
  int valid = 0;
  for (const auto& env : sample_points(vars, ctx)) {
    auto a = numeric_safe(*dp, env, ctx.budget);
    auto b = numeric_safe(*dg, env, ctx.budget);
    if (!a || !b) continue;
    if (*b == 0 || *a == 0) {
      if ((*a == 0) != (*b == 0)) return Cmp::not_equal;
      continue;
    }
    Real r = *a / *b;
    if (ratio && !close(*ratio, r, 1e-9)) return Cmp::not_equal;
    ratio = r;
    ++valid;
  }
  return valid >= 2 ? Cmp::equal : Cmp::not_equal;
}

Cmp compare_values(const Expr& p, const Expr& g, const std::string& ptext, const std::string& gtext,
                   Context& ctx) {
  bool peq = p.kind == Kind::equation, geq = g.kind == Kind::equation;
  if (peq || geq) return peq && geq ? compare_equations(p, g, ctx) : Cmp::not_equal;

  std::set<std::string> vars;
  collect_variables(p, vars);
  collect_variables(g, vars);
  const double tol = ctx.options.relative_tolerance;
  if (vars.empty()) {
    if (!has_constants_or_functions(p) && !has_constants_or_functions(g)) {
      auto ep = exact_safe(p, ctx.budget);
      auto eg = exact_safe(g, ctx.budget);
      if (ep && eg) {
        if (*ep == *eg) return Cmp::equal;
        return either_approximates(ptext, *ep, gtext, *eg) ? Cmp::equal : Cmp::not_equal;
      }
    }
    auto np = numeric_safe(p, {}, ctx.budget);
    auto ng = numeric_safe(g, {}, ctx.budget);
    if (!np || !ng) return Cmp::not_equal;
    if (close(*np, *ng, tol)) return Cmp::equal;
    return either_approximates(ptext, *np, gtext, *ng) ? Cmp::equal : Cmp::not_equal;
  }
  int valid = 0;
  for (const auto& env : sample_points(vars, ctx)) {
    auto a = numeric_safe(p, env, ctx.budget);
    auto b = numeric_safe(g, env, ctx.budget);
    if (!a || !b) continue;
    if (!close(*a, *b, tol)) return Cmp::not_equal;
    ++valid;
  }
  return valid >= 2 ? Cmp::equal : Cmp::not_equal;
}

Cmp compare_scalar(const std::string& p, const std::string& g, Context& ctx) {
  ExprPtr ge;
  try {
    ge = parse_latex(g, ctx.budget);
  } catch (const ParseError&) {
    ge = nullptr;
  }
  ExprPtr pe;
  try {
    pe = parse_latex(p, ctx.budget);
  } catch (const ParseError&) {
    return Cmp::unparseable;
  }
  if (!ge) return Cmp::not_equal;  // gold we cannot read: only the string comparison counts
  return compare_values(*pe, *ge, p, g, ctx);
}

Cmp combine_all(const std::vector<Cmp>& results) {
  bool unparseable = false;
  for (auto r : results) {
    if (r == Cmp::not_equal) return Cmp::not_equal;
    if (r == Cmp::unparseable) unparseable = true;
  }
  return unparseable ? Cmp::unparseable : Cmp::equal;
}

Cmp compare_in_order(const std::vector<std::string>& p, const std::vector<std::string>& g,
                     Context& ctx) {
  if (p.size() != g.size()) return Cmp::not_equal;
  std::vector<Cmp> results;
  for (size_t i = 0; i < p.size(); ++i) {
    results.push_back(compare_normalized(normalized(p[i], ctx), normalized(g[i], ctx), ctx));
    if (results.back() == Cmp::not_equal) return Cmp::not_equal;
  }
  return combine_all(results);
}

template <class Item, class Fn>
Cmp match_unordered(const std::vector<Item>& p, const std::vector<Item>& g, Fn compare) {
  if (p.size() != g.size()) return Cmp::not_equal;
  if (p.size() > 64) return Cmp::not_equal;
  std::vector<bool> used(g.size(), false);
  bool unparseable = false;
  for (const auto& item : p) {
    bool found = false;
    bool item_unparseable = false;
    for (size_t j = 0; j < g.size(); ++j) {
      if (used[j]) continue;
      Cmp r = compare(item, g[j]);
      if (r == Cmp::equal) {
        used[j] = true;
        found = true;
        break;
      }
      if (r == Cmp::unparseable) item_unparseable = true;
    }
    if (!found) {
      if (!item_unparseable) return Cmp::not_equal;
      unparseable = true;
    }
  }
  return unparseable ? Cmp::unparseable : Cmp::equal;
}

Cmp compare_structures(const Structure& p, const Structure& g, Context& ctx) {
  using K = Structure::Kind;
  auto text_cmp = [&](const std::string& a, const std::string& b) {
    return compare_normalized(normalized(a, ctx), normalized(b, ctx), ctx);
  };
  auto is_paren_tuple = [](const Structure& s) {
    return s.kind == K::ordered && s.open == '(' && s.close == ')';
  };
  auto vector_of = [](const Structure& m) -> std::optional<std::vector<std::string>> {
    std::vector<std::string> out;
    if (m.rows.size() == 1) return m.rows[0];
    for (const auto& row : m.rows) {
      if (row.size() != 1) return std::nullopt;
      out.push_back(row[0]);
    }
    return out;
  };

  if (p.kind == K::scalar && g.kind == K::scalar)
    return compare_scalar(p.items[0], g.items[0], ctx);
  // A one-element set is its element.
  if (p.kind == K::set && p.items.size() == 1 && g.kind == K::scalar)
    return text_cmp(p.items[0], g.items[0]);
  if (g.kind == K::set && g.items.size() == 1 && p.kind == K::scalar)
    return text_cmp(p.items[0], g.items[0]);
  if (p.kind == K::union_of && g.kind == K::union_of)
    return match_unordered(p.parts, g.parts, [&](const Structure& a, const Structure& b) {
      return compare_structures(a, b, ctx);
    });
  if (p.kind == K::ordered && g.kind == K::ordered) {
    if (p.open != g.open || p.close != g.close) return Cmp::not_equal;
    return compare_in_order(p.items, g.items, ctx);
  }
  // A bare list for an ordered pair in parentheses: the model dropped the parentheses.
  if (p.kind == K::list && is_paren_tuple(g)) return compare_in_order(p.items, g.items, ctx);
  if ((p.kind == K::set || p.kind == K::list) && (g.kind == K::set || g.kind == K::list))
    return match_unordered(p.items, g.items, text_cmp);
  if (p.kind == K::matrix && g.kind == K::matrix) {
    if (p.rows.size() != g.rows.size()) return Cmp::not_equal;
    std::vector<Cmp> results;
    for (size_t r = 0; r < p.rows.size(); ++r) {
      results.push_back(compare_in_order(p.rows[r], g.rows[r], ctx));
      if (results.back() == Cmp::not_equal) return Cmp::not_equal;
    }
    return combine_all(results);
  }
  // A row or column vector written as a tuple.
  if (p.kind == K::matrix && is_paren_tuple(g)) {
    auto v = vector_of(p);
    return v ? compare_in_order(*v, g.items, ctx) : Cmp::not_equal;
  }
  if (g.kind == K::matrix && is_paren_tuple(p)) {
    auto v = vector_of(g);
    return v ? compare_in_order(p.items, *v, ctx) : Cmp::not_equal;
  }
  // One answer written in several equivalent forms ("$\boxed{15\frac{39}{40}}$ or
  // $\boxed{\frac{639}{40}}$"): every item must equal the gold.
  if (p.kind == K::list && g.kind == K::scalar && p.items.size() <= 16) {
    std::vector<Cmp> results;
    for (const auto& item : p.items) {
      results.push_back(text_cmp(item, g.items[0]));
      if (results.back() == Cmp::not_equal) return Cmp::not_equal;
    }
    return combine_all(results);
  }
  if (p.kind == K::scalar) {
    // A scalar against a structure: not equal, unless the scalar is not even readable.
    Budget& b = ctx.budget;
    try {
      parse_latex(p.items[0], b);
    } catch (const ParseError&) {
      return Cmp::unparseable;
    }
  }
  return Cmp::not_equal;
}

// Structures nest through here (a tuple's items are compared with this again), so the depth is
// bounded like the parser's: ((((1,2),3),4),...) thousands deep is not read.
class StructureDepth {
 public:
  explicit StructureDepth(Context& ctx) : ctx_(ctx) { ++ctx_.structure_depth; }
  ~StructureDepth() { --ctx_.structure_depth; }
  bool too_deep() const { return ctx_.structure_depth > kMaxStructureNesting; }

 private:
  Context& ctx_;
};

Cmp compare_normalized(const std::string& p, const std::string& g, Context& ctx) {
  ctx.budget.tick();
  if (p == g && !p.empty()) return Cmp::equal;
  if (p.empty()) return Cmp::unparseable;
  if (auto gl = choice_letter(g)) {
    auto pl = leading_choice(p);
    if (pl) return *pl == *gl ? Cmp::equal : Cmp::not_equal;
  }
  if (is_word(g) || is_word(p)) return lower(p) == lower(g) ? Cmp::equal : Cmp::not_equal;
  StructureDepth depth(ctx);
  if (depth.too_deep()) return Cmp::unparseable;
  ctx.budget.scan(p.size() + g.size());
  return compare_structures(split_structure(p), split_structure(g), ctx);
}

// The answers' forms before their values (docs/grading.md, rules "inequality-interval",
// "assignment", "equation"): inequalities become the intervals they describe; an assignment or a
// chain ending in a value is that value when the other answer is not an equation; two equations
// with the same variables on the left compare their right sides, others compare by equivalence.
// `p` and `g` are normalize_presentation's output; everything else is compare_normalized's.
Cmp compare_forms(const std::string& p, const std::string& g, Context& ctx) {
  ctx.budget.tick();
  if (p == g && !p.empty()) return Cmp::equal;
  auto normal = [&](const std::string& text) { return normalized(text, ctx); };
  auto pi = inequality_as_interval(p);
  auto gi = inequality_as_interval(g);
  if (pi || gi) return compare_normalized(normal(pi.value_or(p)), normal(gi.value_or(g)), ctx);

  auto pe = equation_form(p);
  auto ge = equation_form(g);
  if (pe && ge) {
    const bool two_sided = pe->parts.size() == 2 && ge->parts.size() == 2;
    if (two_sided && pe->assignment && ge->assignment && pe->parts[0] == ge->parts[0])
      return compare_normalized(normal(pe->parts[1]), normal(ge->parts[1]), ctx);
    if (two_sided) return compare_normalized(p, g, ctx);  // equivalence of the equations
    auto pv = equation_value(*pe);
    auto gv = equation_value(*ge);
    if (pv && gv) return compare_normalized(normal(*pv), normal(*gv), ctx);
    return Cmp::not_equal;
  }
  if (pe || ge) {
    auto value = equation_value(pe ? *pe : *ge);
    if (value) {
      return pe ? compare_normalized(normal(*value), normal(g), ctx)
                : compare_normalized(normal(p), normal(*value), ctx);
    }
  }
  return compare_normalized(normal(p), normal(g), ctx);
}

// Answers longer than kMaxAnswerChars are compared as text only (no real answer is that long; a
// degenerate completion can be). Nullopt when both are short enough to compare normally.
std::optional<std::pair<GradeKind, std::string>> oversized_verdict(std::string_view prediction,
                                                                   std::string_view gold) {
  if (prediction.size() <= kMaxAnswerChars && gold.size() <= kMaxAnswerChars) return std::nullopt;
  const std::string limit = std::to_string(kMaxAnswerChars);
  if (prediction == gold) return std::pair{GradeKind::equal, std::string()};
  if (prediction.size() > kMaxAnswerChars)
    return std::pair{GradeKind::unparseable,
                     "the prediction's answer is longer than " + limit + " characters"};
  return std::pair{GradeKind::not_equal,
                   "the gold answer is longer than " + limit + " characters: compared as text"};
}

// The part of a gold solution to compare against: its last \boxed{}, else what follows "####".
std::string gold_answer_of(std::string_view gold, Budget& budget) {
  if (auto boxed = last_boxed(gold, &budget)) return *boxed;
  budget.scan(gold.size());
  if (auto hashes = gsm8k_gold(gold)) return *hashes;
  return std::string(gold);
}

}  // namespace

const char* to_string(GradeKind kind) {
  switch (kind) {
    case GradeKind::equal:
      return "equal";
    case GradeKind::not_equal:
      return "not_equal";
    case GradeKind::unparseable:
      return "unparseable";
    case GradeKind::timeout:
      return "timeout";
  }
  return "?";
}

GradeKind compare_answers(std::string_view prediction, std::string_view gold, Budget& budget,
                          const GradeOptions& options) {
  if (auto verdict = oversized_verdict(prediction, gold)) return verdict->first;
  Context ctx{budget, options};
  ctx.budget.scan(prediction.size() + gold.size());
  Cmp r = compare_forms(normalize_presentation(prediction), normalize_presentation(gold), ctx);
  switch (r) {
    case Cmp::equal:
      return GradeKind::equal;
    case Cmp::not_equal:
      return GradeKind::not_equal;
    case Cmp::unparseable:
      return GradeKind::unparseable;
  }
  return GradeKind::unparseable;
}

// Extraction (of both answers) runs inside the budget too: a megabyte of repeated markers must
// end in a verdict within the timeout like any other answer.
GradeResult grade(std::string_view prediction, std::string_view gold, const GradeOptions& options) {
  GradeResult result;
  Budget budget(options.timeout);
  result.gold_answer = std::string(gold);
  try {
    if (options.extract_gold) result.gold_answer = gold_answer_of(gold, budget);
    std::optional<std::string> answer = options.extract_prediction
                                            ? extract_answer(prediction, &budget)
                                            : std::optional<std::string>(std::string(prediction));
    if (!answer) {
      result.kind = GradeKind::unparseable;
      result.detail = "no answer found in the prediction";
      return result;
    }
    result.prediction_answer = *answer;
    if (auto verdict = oversized_verdict(*answer, result.gold_answer)) {
      std::tie(result.kind, result.detail) = *verdict;
      return result;
    }
    result.kind = compare_answers(*answer, result.gold_answer, budget, options);
    if (result.kind == GradeKind::unparseable)
      result.detail = "the prediction's answer could not be parsed";
  } catch (const Timeout&) {
    result.kind = GradeKind::timeout;
    result.detail = "grading exceeded its budget of " + std::to_string(options.timeout.count()) +
                    " ms (extraction, parsing and evaluation together)";
  } catch (const std::exception& e) {
    result.kind = GradeKind::unparseable;
    result.detail = e.what();
  }
  return result;
}

std::vector<GradeResult> grade_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                     unsigned threads, const GradeOptions& options) {
  std::vector<GradeResult> results(pairs.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, std::max<size_t>(1, pairs.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < pairs.size(); i = next++)
      results[i] = grade(pairs[i].first, pairs[i].second, options);
  };
  if (threads <= 1) {
    worker();
    return results;
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace rqat::eval
