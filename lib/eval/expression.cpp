// Evaluation of answer expression trees: exact rational arithmetic with size caps, and 50-digit
// floating point with domain checks. Every node visited ticks the comparison's Budget.
#include "eval/expression.h"

#include <boost/math/constants/constants.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace rqat::eval {

namespace mp = boost::multiprecision;

namespace {

constexpr long kMaxExactBits = 100'000;        // largest exact power result, in bits
constexpr long kMaxExactFactorial = 1000;      // n! computed exactly up to this n
constexpr long kMaxNumericFactorial = 5000;    // n! computed numerically up to this n
constexpr double kMaxLog2Magnitude = 100'000;  // |log2(result)| beyond this: overflow

bool is_integer(const Rational& r) { return mp::denominator(r) == 1; }

long bit_length(const mp::cpp_int& x) {
  return x == 0 ? 0 : static_cast<long>(mp::msb(mp::abs(x))) + 1;
}

// Bits of the larger of numerator and denominator.
long bit_length(const Rational& r) {
  return std::max(bit_length(mp::numerator(r)), bit_length(mp::denominator(r)));
}

// Every exact intermediate stays under kMaxExactBits: sums of many fractions with coprime
// denominators and quotients of big powers grow too, not only powers and products. The budget
// pays by size, since each operation on such numbers costs at least that.
std::optional<Rational> capped(Rational r, Budget& budget) {
  const long bits = bit_length(r);
  if (bits > kMaxExactBits) return std::nullopt;
  if (bits > 4096) budget.tick(1 + static_cast<std::uint64_t>(bits) / 64);
  return r;
}

std::optional<mp::cpp_int> exact_integer_root(const mp::cpp_int& x, unsigned k) {
  if (x < 0) {
    if (k % 2 == 0) return std::nullopt;
    auto r = exact_integer_root(-x, k);
    if (!r) return std::nullopt;
    return mp::cpp_int(-*r);
  }
  if (x < 2) return x;
  if (mp::msb(x) > 160) return std::nullopt;  // beyond what 50 digits can pin down
  Real approx = mp::pow(Real(x), Real(1) / Real(k));
  mp::cpp_int guess = static_cast<mp::cpp_int>(mp::round(approx));
  for (int d = -1; d <= 1; ++d) {
    mp::cpp_int c = guess + d;
    if (c >= 0 && mp::pow(c, k) == x) return c;
  }
  return std::nullopt;
}

bool real_is_integer(const Real& x) { return mp::isfinite(x) && mp::floor(x) == x; }

}  // namespace

ExprPtr make_number(Rational value) {
  auto e = std::make_shared<Expr>();
  e->kind = Kind::number;
  e->value = std::move(value);
  return e;
}

ExprPtr make_variable(std::string name) {
  auto e = std::make_shared<Expr>();
  e->kind = Kind::variable;
  e->name = std::move(name);
  return e;
}

ExprPtr make_node(Kind kind, std::vector<ExprPtr> args, std::string name) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  for (const auto& a : args) e->height = std::max(e->height, a->height + 1);
  e->args = std::move(args);
  e->name = std::move(name);
  return e;
}

void collect_variables(const Expr& expr, std::set<std::string>& out) {
  if (expr.kind == Kind::variable) out.insert(expr.name);
  for (const auto& a : expr.args) collect_variables(*a, out);
}

bool has_constants_or_functions(const Expr& expr) {
  switch (expr.kind) {
    case Kind::pi:
    case Kind::e:
    case Kind::infinity:
    case Kind::function:
      return true;
    default:
      break;
  }
  for (const auto& a : expr.args)
    if (has_constants_or_functions(*a)) return true;
  return false;
}

Real to_real(const Rational& value) {
  return Real(mp::numerator(value)) / Real(mp::denominator(value));
}

namespace {

// Helpers of evaluate_exact, one per expression kind that needs more than a line. Each evaluates
// its own arguments so that the budget ticks in the same order as a single recursive walk.

// Stops at the first argument without an exact value (later ones are not evaluated).
std::optional<Rational> exact_sum(const Expr& expr, Budget& budget) {
  Rational sum = 0;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    auto v = evaluate_exact(*expr.args[i], budget);
    if (!v) return std::nullopt;
    auto next = capped(sum + *v, budget);
    if (!next) return std::nullopt;
    sum = std::move(*next);
  }
  return sum;
}

// Gives up as soon as the running product exceeds the size cap, so a long product of large factors
// fails fast instead of growing without bound.
std::optional<Rational> exact_product(const Expr& expr, Budget& budget) {
  Rational product = 1;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    auto v = evaluate_exact(*expr.args[i], budget);
    if (!v) return std::nullopt;
    auto next = capped(product * *v, budget);
    if (!next) return std::nullopt;
    product = std::move(*next);
  }
  return product;
}

// Rational exponent p/q of a perfect q-th power: 8^{2/3} = 4. The q-th root is taken exactly, then
// raised to p through the integer-power path (which applies the size caps).
std::optional<Rational> exact_fractional_power(const Rational& base, const Rational& exponent,
                                               Budget& budget) {
  const mp::cpp_int& q = mp::denominator(exponent);
  if (q > 64 || mp::abs(mp::numerator(exponent)) > 64) return std::nullopt;
  unsigned qi = q.convert_to<unsigned>();
  auto rn = exact_integer_root(mp::numerator(base), qi);
  auto rd = exact_integer_root(mp::denominator(base), qi);
  if (!rn || !rd) return std::nullopt;
  auto rooted = make_number(Rational(*rn) / Rational(*rd));
  auto rest = make_number(Rational(mp::numerator(exponent)));
  return evaluate_exact(*make_node(Kind::pow, {rooted, rest}), budget);
}

// base^n for an integer n. The trivial bases are answered without computing; otherwise the result
// size is estimated first so that 9^9^9 fails before any multiplication.
std::optional<Rational> exact_integer_power(const Rational& base, const mp::cpp_int& n,
                                            Budget& budget) {
  if (base == 0) {
    if (n <= 0) return std::nullopt;
    return Rational(0);
  }
  if (base == 1) return Rational(1);
  if (base == -1) return Rational(n % 2 == 0 ? 1 : -1);
  mp::cpp_int abs_n = mp::abs(n);
  long bits = static_cast<long>(
      std::max(mp::msb(mp::abs(mp::numerator(base))), mp::msb(mp::denominator(base))) + 1);
  if (abs_n > kMaxExactBits || abs_n.convert_to<long>() * bits > kMaxExactBits) return std::nullopt;
  unsigned e = abs_n.convert_to<unsigned>();
  budget.tick(1 + e / 64);
  Rational r =
      Rational(mp::pow(mp::numerator(base), e)) / Rational(mp::pow(mp::denominator(base), e));
  if (n < 0) r = 1 / r;
  return r;
}

// Both operands are evaluated before either is checked (budget ticks as in the original walk).
std::optional<Rational> exact_power(const Expr& expr, Budget& budget) {
  auto base = evaluate_exact(*expr.args[0], budget);
  auto exponent = evaluate_exact(*expr.args[1], budget);
  if (!base || !exponent) return std::nullopt;
  if (!is_integer(*exponent)) return exact_fractional_power(*base, *exponent, budget);
  return exact_integer_power(*base, mp::numerator(*exponent), budget);
}

// Exact only for perfect k-th powers (numerator and denominator separately).
std::optional<Rational> exact_root(const Expr& expr, Budget& budget) {
  auto x = evaluate_exact(*expr.args[0], budget);
  auto k = evaluate_exact(*expr.args[1], budget);
  if (!x || !k || !is_integer(*k) || *k < 2 || *k > 64) return std::nullopt;
  unsigned ki = mp::numerator(*k).convert_to<unsigned>();
  auto rn = exact_integer_root(mp::numerator(*x), ki);
  auto rd = exact_integer_root(mp::denominator(*x), ki);
  if (!rn || !rd) return std::nullopt;
  return Rational(*rn) / Rational(*rd);
}

// Capped at kMaxExactFactorial so 10^9! fails fast; the budget pays for the multiplications.
std::optional<Rational> exact_factorial(const Expr& expr, Budget& budget) {
  auto x = evaluate_exact(*expr.args[0], budget);
  if (!x || !is_integer(*x) || *x < 0 || *x > kMaxExactFactorial) return std::nullopt;
  long n = mp::numerator(*x).convert_to<long>();
  budget.tick(1 + n / 8);
  mp::cpp_int f = 1;
  for (long i = 2; i <= n; ++i) f *= i;
  return Rational(f);
}

// binom(n, k) for any rational n and integer k, as the falling product n (n-1) ... / k!. The
// numerator grows to about k times n's size before the division by k!, so that product is capped
// up front: binom(10^1000, 1000) would otherwise build a million-bit rational step by step.
std::optional<Rational> exact_binomial(const Expr& expr, Budget& budget) {
  auto n = evaluate_exact(*expr.args[0], budget);
  auto k = evaluate_exact(*expr.args[1], budget);
  if (!n || !k || !is_integer(*k)) return std::nullopt;
  if (*k < 0) return Rational(0);
  if (*k > kMaxExactFactorial) return std::nullopt;
  long ki = mp::numerator(*k).convert_to<long>();
  if ((bit_length(*n) + 1) * ki > kMaxExactBits) return std::nullopt;
  budget.tick(1 + ki / 8);
  Rational r = 1;
  for (long i = 0; i < ki; ++i) r = r * (*n - i) / (i + 1);
  return r;
}

}  // namespace

std::optional<Rational> evaluate_exact(const Expr& expr, Budget& budget) {
  budget.tick();
  auto arg = [&](size_t i) { return evaluate_exact(*expr.args[i], budget); };
  switch (expr.kind) {
    case Kind::number:
      return expr.value;
    case Kind::add:
      return exact_sum(expr, budget);
    case Kind::mul:
      return exact_product(expr, budget);
    case Kind::neg: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Rational(-*v);
    }
    case Kind::div: {
      auto a = arg(0);
      auto b = arg(1);
      if (!a || !b || *b == 0) return std::nullopt;
      return capped(*a / *b, budget);
    }
    case Kind::pow:
      return exact_power(expr, budget);
    case Kind::root:
      return exact_root(expr, budget);
    case Kind::factorial:
      return exact_factorial(expr, budget);
    case Kind::binomial:
      return exact_binomial(expr, budget);
    case Kind::abs: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Rational(mp::abs(*v));
    }
    default:
      return std::nullopt;
  }
}

namespace {

// Helpers of evaluate_numeric, one per expression kind that needs more than a line. Each evaluates
// its own arguments so that the budget ticks in the same order as a single recursive walk.

// NaN (e.g. inf - inf) means "undefined": no value. Infinities pass through.
std::optional<Real> finite_or_none(const Real& v) {
  if (mp::isnan(v)) return std::nullopt;
  return v;
}

// Stops at the first argument without a value (later ones are not evaluated).
std::optional<Real> numeric_sum(const Expr& expr, const Env& env, Budget& budget) {
  Real sum = 0;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    auto v = evaluate_numeric(*expr.args[i], env, budget);
    if (!v) return std::nullopt;
    sum += *v;
  }
  return finite_or_none(sum);
}

// Stops at the first argument without a value (later ones are not evaluated).
std::optional<Real> numeric_product(const Expr& expr, const Env& env, Budget& budget) {
  Real product = 1;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    auto v = evaluate_numeric(*expr.args[i], env, budget);
    if (!v) return std::nullopt;
    product *= *v;
  }
  return finite_or_none(product);
}

// Real powers with the domain made explicit: 0^x needs x > 0, a negative base needs an integer
// exponent (sign from its parity), and results beyond 2^kMaxLog2Magnitude count as overflow.
std::optional<Real> numeric_power(const Expr& expr, const Env& env, Budget& budget) {
  auto base = evaluate_numeric(*expr.args[0], env, budget);
  auto exponent = evaluate_numeric(*expr.args[1], env, budget);
  if (!base || !exponent || !mp::isfinite(*exponent)) return std::nullopt;
  if (mp::isinf(*base)) return std::nullopt;
  if (*base == 0) {
    if (*exponent <= 0) return std::nullopt;
    return Real(0);
  }
  Real magnitude = mp::abs(*exponent) * mp::log2(mp::abs(*base));
  if (mp::abs(magnitude) > kMaxLog2Magnitude) return std::nullopt;
  if (*base < 0) {
    if (!real_is_integer(*exponent)) return std::nullopt;
    Real r = mp::pow(-*base, *exponent);
    bool odd = mp::fmod(mp::abs(*exponent), Real(2)) == 1;
    return odd ? Real(-r) : r;
  }
  return finite_or_none(mp::pow(*base, *exponent));
}

// k-th root; odd roots of negative numbers are real (the cube root of -8 is -2).
std::optional<Real> numeric_root(const Expr& expr, const Env& env, Budget& budget) {
  auto x = evaluate_numeric(*expr.args[0], env, budget);
  auto k = evaluate_numeric(*expr.args[1], env, budget);
  if (!x || !k || *k == 0 || !mp::isfinite(*x)) return std::nullopt;
  if (*x < 0) {
    if (!real_is_integer(*k) || mp::fmod(mp::abs(*k), Real(2)) != 1) return std::nullopt;
    return Real(-mp::pow(-*x, 1 / *k));
  }
  if (*k == 2) return Real(mp::sqrt(*x));
  return finite_or_none(mp::pow(*x, 1 / *k));
}

// Named functions of one finite argument, nullopt outside their domain (poles of tan, cot, sec,
// csc; |x| > 1 for arcsin, arccos; log of a non-positive number) and for unknown names. "log" with
// a second argument is the logarithm to that base, evaluated only after the first one succeeded.
std::optional<Real> numeric_function(const Expr& expr, const Env& env, Budget& budget) {
  auto x = evaluate_numeric(*expr.args[0], env, budget);
  if (!x || !mp::isfinite(*x)) return std::nullopt;
  const std::string& f = expr.name;
  const Real& v = *x;
  if (f == "sin") return Real(mp::sin(v));
  if (f == "cos") return Real(mp::cos(v));
  if (f == "tan") {
    Real c = mp::cos(v);
    if (c == 0) return std::nullopt;
    return Real(mp::sin(v) / c);
  }
  if (f == "cot" || f == "sec" || f == "csc") {
    Real d = f == "sec" ? Real(mp::cos(v)) : Real(mp::sin(v));
    if (d == 0) return std::nullopt;
    if (f == "cot") return Real(mp::cos(v) / d);
    return Real(1 / d);
  }
  if (f == "arcsin" || f == "arccos") {
    if (mp::abs(v) > 1) return std::nullopt;
    return f == "arcsin" ? Real(mp::asin(v)) : Real(mp::acos(v));
  }
  if (f == "arctan") return Real(mp::atan(v));
  if (f == "sinh") return Real(mp::sinh(v));
  if (f == "cosh") return Real(mp::cosh(v));
  if (f == "tanh") return Real(mp::tanh(v));
  if (f == "exp") {
    if (mp::abs(v) > 50000) return std::nullopt;
    return Real(mp::exp(v));
  }
  if (f == "ln" || f == "log") {
    if (v <= 0) return std::nullopt;
    Real r = mp::log(v);
    if (expr.args.size() == 2) {
      auto b = evaluate_numeric(*expr.args[1], env, budget);
      if (!b || *b <= 0 || *b == 1) return std::nullopt;
      r /= mp::log(*b);
    }
    return r;
  }
  if (f == "sqrt") {
    if (v < 0) return std::nullopt;
    return Real(mp::sqrt(v));
  }
  return std::nullopt;
}

// Capped at kMaxNumericFactorial; the budget pays for the multiplications.
std::optional<Real> numeric_factorial(const Expr& expr, const Env& env, Budget& budget) {
  auto x = evaluate_numeric(*expr.args[0], env, budget);
  if (!x || !real_is_integer(*x) || *x < 0 || *x > kMaxNumericFactorial) return std::nullopt;
  long n = x->convert_to<long>();
  budget.tick(1 + n / 8);
  Real f = 1;
  for (long i = 2; i <= n; ++i) f *= i;
  return f;
}

// binom(n, k) for any real n and integer k, as the falling product n (n-1) ... / k!.
std::optional<Real> numeric_binomial(const Expr& expr, const Env& env, Budget& budget) {
  auto n = evaluate_numeric(*expr.args[0], env, budget);
  auto k = evaluate_numeric(*expr.args[1], env, budget);
  if (!n || !k || !real_is_integer(*k)) return std::nullopt;
  if (*k < 0) return Real(0);
  if (*k > kMaxNumericFactorial) return std::nullopt;
  long ki = k->convert_to<long>();
  budget.tick(1 + ki / 8);
  Real r = 1;
  for (long i = 0; i < ki; ++i) r = r * (*n - i) / (i + 1);
  return finite_or_none(r);
}

}  // namespace

std::optional<Real> evaluate_numeric(const Expr& expr, const Env& env, Budget& budget) {
  budget.tick();
  auto arg = [&](size_t i) { return evaluate_numeric(*expr.args[i], env, budget); };
  switch (expr.kind) {
    case Kind::number:
      return to_real(expr.value);
    case Kind::variable: {
      auto it = env.find(expr.name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    }
    case Kind::pi:
      return boost::math::constants::pi<Real>();
    case Kind::e:
      return boost::math::constants::e<Real>();
    case Kind::infinity:
      return std::numeric_limits<Real>::infinity();
    case Kind::add:
      return numeric_sum(expr, env, budget);
    case Kind::mul:
      return numeric_product(expr, env, budget);
    case Kind::neg: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Real(-*v);
    }
    case Kind::div: {
      auto a = arg(0);
      auto b = arg(1);
      if (!a || !b || *b == 0) return std::nullopt;
      return finite_or_none(*a / *b);
    }
    case Kind::pow:
      return numeric_power(expr, env, budget);
    case Kind::root:
      return numeric_root(expr, env, budget);
    case Kind::function:
      return numeric_function(expr, env, budget);
    case Kind::factorial:
      return numeric_factorial(expr, env, budget);
    case Kind::binomial:
      return numeric_binomial(expr, env, budget);
    case Kind::abs: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Real(mp::abs(*v));
    }
    default:
      return std::nullopt;
  }
}

}  // namespace rqat::eval
