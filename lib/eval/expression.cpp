// Evaluation of answer expression trees: exact rational arithmetic with size caps, and 50-digit
// floating point with domain checks. Every node visited ticks the comparison's Budget.
#include "eval/expression.h"

#include <boost/math/constants/constants.hpp>

#include <cmath>
#include <limits>

namespace rqat::eval {

namespace mp = boost::multiprecision;

namespace {

constexpr long kMaxExactBits = 100'000;        // largest exact power result, in bits
constexpr long kMaxExactFactorial = 1000;      // n! computed exactly up to this n
constexpr long kMaxNumericFactorial = 5000;    // n! computed numerically up to this n
constexpr double kMaxLog2Magnitude = 100'000;  // |log2(result)| beyond this: overflow

bool is_integer(const Rational& r) {
  return mp::denominator(r) == 1;
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

bool real_is_integer(const Real& x) {
  return mp::isfinite(x) && mp::floor(x) == x;
}

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

std::optional<Rational> evaluate_exact(const Expr& expr, Budget& budget) {
  budget.tick();
  auto arg = [&](size_t i) { return evaluate_exact(*expr.args[i], budget); };
  switch (expr.kind) {
    case Kind::number:
      return expr.value;
    case Kind::add: {
      Rational sum = 0;
      for (size_t i = 0; i < expr.args.size(); ++i) {
        auto v = arg(i);
        if (!v) return std::nullopt;
        sum += *v;
      }
      return sum;
    }
    case Kind::mul: {
      Rational product = 1;
      for (size_t i = 0; i < expr.args.size(); ++i) {
        auto v = arg(i);
        if (!v) return std::nullopt;
        product *= *v;
        mp::cpp_int num = mp::numerator(product);
        if (num != 0 && static_cast<long>(mp::msb(mp::abs(num))) > kMaxExactBits)
          return std::nullopt;
      }
      return product;
    }
    case Kind::neg: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Rational(-*v);
    }
    case Kind::div: {
      auto a = arg(0);
      auto b = arg(1);
      if (!a || !b || *b == 0) return std::nullopt;
      return Rational(*a / *b);
    }
    case Kind::pow: {
      auto base = arg(0);
      auto exponent = arg(1);
      if (!base || !exponent) return std::nullopt;
      if (!is_integer(*exponent)) {
        // Rational exponent p/q of a perfect q-th power: 8^{2/3} = 4.
        const mp::cpp_int& q = mp::denominator(*exponent);
        if (q > 64 || mp::abs(mp::numerator(*exponent)) > 64) return std::nullopt;
        unsigned qi = q.convert_to<unsigned>();
        auto rn = exact_integer_root(mp::numerator(*base), qi);
        auto rd = exact_integer_root(mp::denominator(*base), qi);
        if (!rn || !rd) return std::nullopt;
        auto rooted = make_number(Rational(*rn) / Rational(*rd));
        auto rest = make_number(Rational(mp::numerator(*exponent)));
        return evaluate_exact(*make_node(Kind::pow, {rooted, rest}), budget);
      }
      const mp::cpp_int& n = mp::numerator(*exponent);
      if (*base == 0) {
        if (n <= 0) return std::nullopt;
        return Rational(0);
      }
      if (*base == 1) return Rational(1);
      if (*base == -1) return Rational(n % 2 == 0 ? 1 : -1);
      mp::cpp_int abs_n = mp::abs(n);
      long bits = static_cast<long>(
          std::max(mp::msb(mp::abs(mp::numerator(*base))), mp::msb(mp::denominator(*base))) + 1);
      if (abs_n > kMaxExactBits || abs_n.convert_to<long>() * bits > kMaxExactBits)
        return std::nullopt;
      unsigned e = abs_n.convert_to<unsigned>();
      budget.tick(1 + e / 64);
      Rational r =
          Rational(mp::pow(mp::numerator(*base), e)) / Rational(mp::pow(mp::denominator(*base), e));
      if (n < 0) r = 1 / r;
      return r;
    }
    case Kind::root: {
      auto x = arg(0);
      auto k = arg(1);
      if (!x || !k || !is_integer(*k) || *k < 2 || *k > 64) return std::nullopt;
      unsigned ki = mp::numerator(*k).convert_to<unsigned>();
      auto rn = exact_integer_root(mp::numerator(*x), ki);
      auto rd = exact_integer_root(mp::denominator(*x), ki);
      if (!rn || !rd) return std::nullopt;
      return Rational(*rn) / Rational(*rd);
    }
    case Kind::factorial: {
      auto x = arg(0);
      if (!x || !is_integer(*x) || *x < 0 || *x > kMaxExactFactorial) return std::nullopt;
      long n = mp::numerator(*x).convert_to<long>();
      budget.tick(1 + n / 8);
      mp::cpp_int f = 1;
      for (long i = 2; i <= n; ++i) f *= i;
      return Rational(f);
    }
    case Kind::binomial: {
      auto n = arg(0);
      auto k = arg(1);
      if (!n || !k || !is_integer(*k)) return std::nullopt;
      if (*k < 0) return Rational(0);
      if (*k > kMaxExactFactorial) return std::nullopt;
      long ki = mp::numerator(*k).convert_to<long>();
      budget.tick(1 + ki / 8);
      Rational r = 1;
      for (long i = 0; i < ki; ++i) r = r * (*n - i) / (i + 1);
      return r;
    }
    case Kind::abs: {
      auto v = arg(0);
      if (!v) return std::nullopt;
      return Rational(mp::abs(*v));
    }
    default:
      return std::nullopt;
  }
}

std::optional<Real> evaluate_numeric(const Expr& expr, const Env& env, Budget& budget) {
  budget.tick();
  auto arg = [&](size_t i) { return evaluate_numeric(*expr.args[i], env, budget); };
  auto finite_or_none = [](const Real& v) -> std::optional<Real> {
    if (mp::isnan(v)) return std::nullopt;
    return v;
  };
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
    case Kind::add: {
      Real sum = 0;
      for (size_t i = 0; i < expr.args.size(); ++i) {
        auto v = arg(i);
        if (!v) return std::nullopt;
        sum += *v;
      }
      return finite_or_none(sum);
    }
    case Kind::mul: {
      Real product = 1;
      for (size_t i = 0; i < expr.args.size(); ++i) {
        auto v = arg(i);
        if (!v) return std::nullopt;
        product *= *v;
      }
      return finite_or_none(product);
    }
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
    case Kind::pow: {
      auto base = arg(0);
      auto exponent = arg(1);
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
    case Kind::root: {
      auto x = arg(0);
      auto k = arg(1);
      if (!x || !k || *k == 0 || !mp::isfinite(*x)) return std::nullopt;
      if (*x < 0) {
        if (!real_is_integer(*k) || mp::fmod(mp::abs(*k), Real(2)) != 1) return std::nullopt;
        return Real(-mp::pow(-*x, 1 / *k));
      }
      if (*k == 2) return Real(mp::sqrt(*x));
      return finite_or_none(mp::pow(*x, 1 / *k));
    }
    case Kind::function: {
      auto x = arg(0);
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
          auto b = arg(1);
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
    case Kind::factorial: {
      auto x = arg(0);
      if (!x || !real_is_integer(*x) || *x < 0 || *x > kMaxNumericFactorial) return std::nullopt;
      long n = x->convert_to<long>();
      budget.tick(1 + n / 8);
      Real f = 1;
      for (long i = 2; i <= n; ++i) f *= i;
      return f;
    }
    case Kind::binomial: {
      auto n = arg(0);
      auto k = arg(1);
      if (!n || !k || !real_is_integer(*k)) return std::nullopt;
      if (*k < 0) return Real(0);
      if (*k > kMaxNumericFactorial) return std::nullopt;
      long ki = k->convert_to<long>();
      budget.tick(1 + ki / 8);
      Real r = 1;
      for (long i = 0; i < ki; ++i) r = r * (*n - i) / (i + 1);
      return finite_or_none(r);
    }
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
