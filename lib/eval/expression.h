// Expression trees of parsed math answers and their evaluation: exactly with rational arithmetic
// (boost cpp_rational) when only numbers occur, else in 50-digit binary floating point
// (cpp_bin_float_50) with values for the variables. Sizes are capped so 9^9^9 or 10^9! fail fast.
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/cpp_int.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "eval/budget.h"

namespace rqat::eval {

using Rational = boost::multiprecision::cpp_rational;
using Real = boost::multiprecision::cpp_bin_float_50;

enum class Kind {
  number,    // value
  variable,  // name ("x", "theta", "x_1", or a based numeral such as "204_5")
  pi,
  e,
  infinity,
  add,        // args...
  mul,        // args...
  neg,        // args[0]
  div,        // args[0] / args[1]
  pow,        // args[0] ^ args[1]
  root,       // args[1]-th root of args[0]
  function,   // name(args[0]); "log" with two args is log base args[1]
  factorial,  // args[0]!
  binomial,   // binom(args[0], args[1])
  abs,        // |args[0]|
  equation,   // args[0] = args[1]
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  Kind kind = Kind::number;
  Rational value;
  std::string name;
  std::vector<ExprPtr> args;
  // 1 for a leaf, else 1 + the tallest argument: evaluation recurses this deep, so the parser
  // refuses trees taller than kMaxNesting (a chain such as 1/1/1/... or 3!!!... of any length).
  int height = 1;
};

ExprPtr make_number(Rational value);
ExprPtr make_variable(std::string name);
ExprPtr make_node(Kind kind, std::vector<ExprPtr> args, std::string name = {});

// Names of every variable in the tree.
void collect_variables(const Expr& expr, std::set<std::string>& out);
// True when pi, e, infinity or a function occurs.
bool has_constants_or_functions(const Expr& expr);

// The exact value when the tree is a rational number computable within the caps (integer powers
// up to 10^5 result bits, factorials up to 1000!, perfect square roots), else nullopt.
std::optional<Rational> evaluate_exact(const Expr& expr, Budget& budget);

// The value with `env` giving the variables; nullopt outside the domain (division by zero, log of a
// non-positive number, sqrt of a negative), for missing variables and for results beyond 2^100000.
using Env = std::map<std::string, Real>;
std::optional<Real> evaluate_numeric(const Expr& expr, const Env& env, Budget& budget);

Real to_real(const Rational& value);

}  // namespace rqat::eval
