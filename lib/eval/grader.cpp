// Grader: string equality after normalization first, then multiple-choice letters and words, then
// structure (tuples, intervals, sets, lists, matrices, unions) element by element, then values.
#include "eval/grader.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "eval/answer_extraction.h"
#include "eval/answer_structure.h"
#include "eval/expression.h"
#include "eval/latex_parser.h"
#include "eval/normalize.h"

namespace rqat::eval {

namespace mp = boost::multiprecision;

namespace {

enum class Cmp { equal, not_equal, unparseable };

struct Context {
  Budget& budget;
  const GradeOptions& options;
};

Cmp compare_normalized(const std::string& p, const std::string& g, Context& ctx);

// "B", "(B)", "B)" -> 'B' for answer choices A-E.
std::optional<char> choice_letter(std::string_view s) {
  if (s.size() == 1 && s[0] >= 'A' && s[0] <= 'E') return s[0];
  if (s.size() == 3 && s[0] == '(' && s[2] == ')' && s[1] >= 'A' && s[1] <= 'E') return s[1];
  if (s.size() == 2 && s[1] == ')' && s[0] >= 'A' && s[0] <= 'E') return s[0];
  return std::nullopt;
}

// A prediction that opens with its choice: "(B) 12", "B: 12".
std::optional<char> leading_choice(std::string_view s) {
  if (auto c = choice_letter(s)) return c;
  if (s.size() > 3 && s[0] == '(' && s[2] == ')' && s[1] >= 'A' && s[1] <= 'E' &&
      (std::isalnum(static_cast<unsigned char>(s[3])) || s[3] == ':' || s[3] == '\\'))
    return s[1];
  return std::nullopt;
}

// A plain word of three or more letters ("even", "Evelyn"): compared as text, not as a product.
bool is_word(std::string_view s) {
  if (s.size() < 3) return false;
  for (char c : s)
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != ' ') return false;
  static const std::set<std::string, std::less<>> kMath = {"pi",  "sin", "cos", "tan", "cot", "sec",
                                                           "csc", "log", "ln",  "exp", "sqrt"};
  for (const auto& f : kMath)
    if (s.rfind(f, 0) == 0) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool close(const Real& a, const Real& b, double tol) {
  if (mp::isinf(a) || mp::isinf(b)) return mp::isinf(a) && mp::isinf(b) && (a > 0) == (b > 0);
  Real diff = mp::abs(a - b);
  if (diff <= Real("1e-30")) return true;
  return diff <= Real(tol) * std::max(mp::abs(a), mp::abs(b));
}

// A decimal literal written to k places with at least 3 significant digits matches a value when it
// is that value rounded (half up) or truncated to k places: 0.333 and 0.3333 match 1/3, 0.667 and
// 0.666 match 2/3, 1.41 matches sqrt(2), 0.67 (two significant digits) and 1.42 do not.
bool decimal_matches(std::string_view literal, const Real& value) {
  std::string_view s = literal;
  bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  size_t point = s.find('.');
  if (point == std::string_view::npos || point + 1 >= s.size()) return false;
  size_t significant = 0;
  bool leading = true;
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == point) continue;
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    digits += s[i];
    if (leading && s[i] == '0') continue;
    leading = false;
    ++significant;
  }
  if (significant < 3 || digits.size() > 60 || mp::isinf(value)) return false;
  if ((value < 0) != negative && value != 0) return false;
  size_t places = s.size() - point - 1;
  Real scaled = mp::abs(value) * mp::pow(Real(10), static_cast<int>(places));
  Real written{digits};
  return written == mp::floor(scaled) || written == mp::floor(scaled + Real(0.5));
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
        return decimal_matches(ptext, to_real(*eg)) || decimal_matches(gtext, to_real(*ep))
                   ? Cmp::equal
                   : Cmp::not_equal;
      }
    }
    auto np = numeric_safe(p, {}, ctx.budget);
    auto ng = numeric_safe(g, {}, ctx.budget);
    if (!np || !ng) return Cmp::not_equal;
    if (close(*np, *ng, tol)) return Cmp::equal;
    return decimal_matches(ptext, *ng) || decimal_matches(gtext, *np) ? Cmp::equal : Cmp::not_equal;
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
    results.push_back(compare_normalized(normalize_answer(p[i]), normalize_answer(g[i]), ctx));
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
    return compare_normalized(normalize_answer(a), normalize_answer(b), ctx);
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

Cmp compare_normalized(const std::string& p, const std::string& g, Context& ctx) {
  ctx.budget.tick();
  if (p == g && !p.empty()) return Cmp::equal;
  if (p.empty()) return Cmp::unparseable;
  if (auto gl = choice_letter(g)) {
    auto pl = leading_choice(p);
    if (pl) return *pl == *gl ? Cmp::equal : Cmp::not_equal;
  }
  if (is_word(g) || is_word(p)) return lower(p) == lower(g) ? Cmp::equal : Cmp::not_equal;
  return compare_structures(split_structure(p), split_structure(g), ctx);
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
  Context ctx{budget, options};
  Cmp r = compare_normalized(normalize_answer(prediction), normalize_answer(gold), ctx);
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

GradeResult grade(std::string_view prediction, std::string_view gold, const GradeOptions& options) {
  GradeResult result;
  Budget budget(options.timeout);
  result.gold_answer = std::string(gold);
  if (options.extract_gold) {
    if (auto boxed = last_boxed(gold)) {
      result.gold_answer = *boxed;
    } else if (auto hashes = gsm8k_gold(gold)) {
      result.gold_answer = *hashes;
    }
  }
  try {
    std::optional<std::string> answer = options.extract_prediction
                                            ? extract_answer(prediction)
                                            : std::optional<std::string>(std::string(prediction));
    if (!answer) {
      result.kind = GradeKind::unparseable;
      result.detail = "no answer found in the prediction";
      return result;
    }
    result.prediction_answer = *answer;
    result.kind = compare_answers(*answer, result.gold_answer, budget, options);
    if (result.kind == GradeKind::unparseable)
      result.detail = "the prediction's answer could not be parsed";
  } catch (const Timeout&) {
    result.kind = GradeKind::timeout;
    result.detail = "comparison exceeded its budget";
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
