// Recursive-descent parser of answer expressions, working directly on the characters so that
// LaTeX's one-token arguments (\frac12, \sqrt2, x^2) are read as LaTeX reads them. Precedence,
// lowest first:
// '=', '+'/'-', '*' '/' \cdot \times \div and implicit products, unary minus, '^' (right), '!'.
#include "eval/latex_parser.h"

#include <array>
#include <cctype>
#include <string>

namespace rqat::eval {

namespace {

// Function names recognized after a backslash or as plain letters, longest first.
constexpr std::array<std::string_view, 17> kFunctions = {
    "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sqrt", "sin", "cos",
    "tan",    "cot",    "sec",    "csc",  "log",  "exp",  "ln",   "lg"};

constexpr std::array<std::string_view, 30> kGreek = {
    "alpha", "beta",     "gamma", "delta",   "epsilon", "varepsilon", "zeta", "eta",
    "theta", "vartheta", "iota",  "kappa",   "lambda",  "mu",         "nu",   "xi",
    "rho",   "sigma",    "tau",   "upsilon", "phi",     "varphi",     "chi",  "psi",
    "omega", "Gamma",    "Delta", "Theta",   "Phi",     "Omega"};

bool is_function_name(std::string_view name) {
  for (auto f : kFunctions)
    if (f == name) return true;
  return false;
}

bool is_greek(std::string_view name) {
  for (auto g : kGreek)
    if (g == name) return true;
  return false;
}

bool is_integer_literal(const Expr& e) {
  return e.kind == Kind::number && boost::multiprecision::denominator(e.value) == 1 && e.value >= 0;
}

class Parser {
 public:
  Parser(std::string_view text, Budget& budget) : s_(text), budget_(budget) {}

  ExprPtr parse_all() {
    ExprPtr lhs = parse_sum();
    skip_ws();
    if (peek() == '=') {
      ++pos_;
      ExprPtr rhs = parse_sum();
      skip_ws();
      if (!at_end()) error("unexpected text after the equation");
      return node(Kind::equation, {lhs, rhs});
    }
    if (!at_end()) error("unexpected character");
    return lhs;
  }

 private:
  [[noreturn]] void error(const char* what) {
    throw ParseError(std::string(what) + " at offset " + std::to_string(pos_));
  }

  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  // The command name at pos_ (pos_ at a backslash), without consuming it.
  std::string_view peek_command() const {
    if (peek() != '\\') return {};
    size_t end = pos_ + 1;
    while (end < s_.size() && std::isalpha(static_cast<unsigned char>(s_[end]))) ++end;
    if (end == pos_ + 1 && end < s_.size()) ++end;  // \{ \| \, ...
    return s_.substr(pos_ + 1, end - pos_ - 1);
  }
  void consume_command() { pos_ += 1 + peek_command().size(); }
  void expect(char c) {
    skip_ws();
    if (peek() != c) error("missing bracket");
    ++pos_;
  }

  // make_node, refusing trees taller than kMaxNesting: chains built by loops (a/b/c/..., n!!!...)
  // grow the tree without recursing here, and evaluating them would.
  ExprPtr node(Kind kind, std::vector<ExprPtr> args, std::string name = {}) {
    ExprPtr e = make_node(kind, std::move(args), std::move(name));
    if (e->height > kMaxNesting) error("nesting too deep");
    return e;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.error("nesting too deep");
      p.budget_.tick();
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  ExprPtr parse_sum() {
    DepthGuard guard(*this);
    std::vector<ExprPtr> terms;
    skip_ws();
    bool negate = false;
    if (peek() == '-' || peek() == '+') {
      negate = peek() == '-';
      ++pos_;
    }
    ExprPtr t = parse_product();
    terms.push_back(negate ? node(Kind::neg, {t}) : t);
    for (;;) {
      skip_ws();
      char c = peek();
      if (c == '+' || c == '-') {
        ++pos_;
        ExprPtr next = parse_product();
        terms.push_back(c == '-' ? node(Kind::neg, {next}) : next);
        continue;
      }
      if (c == '\\' && peek_command() == "pm") error("\\pm inside an expression");
      break;
    }
    return terms.size() == 1 ? terms[0] : node(Kind::add, std::move(terms));
  }

  bool starts_factor() {
    skip_ws();
    char c = peek();
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        std::isalpha(static_cast<unsigned char>(c)) || c == '(' || c == '{')
      return true;
    if (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))) return true;
    if (c == '\\') {
      std::string_view cmd = peek_command();
      return cmd == "frac" || cmd == "sqrt" || cmd == "binom" || cmd == "pi" || cmd == "infty" ||
             cmd == "operatorname" || is_function_name(cmd) || is_greek(cmd);
    }
    return false;
  }

  ExprPtr parse_product() {
    DepthGuard guard(*this);
    ExprPtr acc = parse_signed_factor();
    std::vector<ExprPtr> factors{acc};
    for (;;) {
      skip_ws();
      char c = peek();
      bool divide = false;
      // A mixed number: 137\frac{1}{2} is 137 + 1/2 (an integer literal, then a fraction of
      // integers).
      bool mixed_candidate = factors.size() == 1 && is_integer_literal(*factors[0]) && c == '\\' &&
                             peek_command() == "frac";
      if (c == '*') {
        ++pos_;
      } else if (c == '/') {
        ++pos_;
        divide = true;
      } else if (c == '\\' && (peek_command() == "cdot" || peek_command() == "times")) {
        consume_command();
      } else if (c == '\\' && peek_command() == "div") {
        consume_command();
        divide = true;
      } else if (starts_factor()) {
        // implicit multiplication
      } else {
        break;
      }
      ExprPtr next = parse_signed_factor();
      if (mixed_candidate && next->kind == Kind::div && is_integer_literal(*next->args[0]) &&
          is_integer_literal(*next->args[1])) {
        factors = {node(Kind::add, {factors[0], next})};
        continue;
      }
      if (divide) {
        ExprPtr left = factors.size() == 1 ? factors[0] : node(Kind::mul, factors);
        factors = {node(Kind::div, {left, next})};
      } else {
        factors.push_back(next);
      }
    }
    return factors.size() == 1 ? factors[0] : node(Kind::mul, std::move(factors));
  }

  ExprPtr parse_signed_factor() {
    DepthGuard guard(*this);
    skip_ws();
    if (peek() == '-') {
      ++pos_;
      return node(Kind::neg, {parse_signed_factor()});
    }
    if (peek() == '+') {
      ++pos_;
      return parse_signed_factor();
    }
    return parse_power();
  }

  ExprPtr parse_power() {
    DepthGuard guard(*this);
    ExprPtr base = parse_postfix(parse_primary());
    skip_ws();
    if (peek() == '^') {
      ++pos_;
      ExprPtr exponent = parse_exponent();
      return parse_postfix(node(Kind::pow, {base, exponent}));
    }
    return base;
  }

  // The exponent after '^': a braced group, a parenthesized expression, a signed number, a letter
  // or a command; itself possibly raised again (right associative: 2^3^2 = 2^9).
  ExprPtr parse_exponent() {
    DepthGuard guard(*this);
    skip_ws();
    ExprPtr e;
    char c = peek();
    if (c == '-') {
      ++pos_;
      return node(Kind::neg, {parse_exponent()});
    }
    if (c == '{' || c == '(') {
      e = parse_primary();
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      e = parse_number();
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      e = make_variable(std::string(1, c));
      ++pos_;
      if (c == 'e') e = node(Kind::e, {});
    } else if (c == '\\') {
      e = parse_primary();
    } else {
      error("missing exponent");
    }
    e = parse_postfix(e);
    skip_ws();
    if (peek() == '^') {
      ++pos_;
      e = node(Kind::pow, {e, parse_exponent()});
    }
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      skip_ws();
      if (peek() == '!') {
        ++pos_;
        e = node(Kind::factorial, {e});
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_number() {
    size_t start = pos_;
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    size_t point = std::string::npos;
    if (peek() == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))) {
      point = pos_;
      ++pos_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    std::string digits(s_.substr(start, pos_ - start));
    if (digits.size() > 2000) error("number too long");
    budget_.tick(1 + digits.size() / 64);
    Rational value;
    // cpp_int reads a leading 0 as octal: parse decimal digits without leading zeros.
    auto decimal = [](std::string d) {
      size_t nz = d.find_first_not_of('0');
      d = nz == std::string::npos ? "0" : d.substr(nz);
      return boost::multiprecision::cpp_int(d);
    };
    if (point == std::string::npos) {
      value = Rational(decimal(digits));
    } else {
      size_t frac_digits = pos_ - point - 1;
      std::string all = digits.substr(0, point - start) + digits.substr(point - start + 1);
      if (all.empty()) error("bad number");
      value = Rational(decimal(all)) /
              Rational(boost::multiprecision::pow(boost::multiprecision::cpp_int(10),
                                                  static_cast<unsigned>(frac_digits)));
    }
    // A numeral with a base subscript (204_5) is kept as an opaque symbol of its own.
    if (peek() == '_') {
      ++pos_;
      std::string base = read_subscript();
      return make_variable(std::string(s_.substr(
                               start, point == std::string::npos ? digits.size() : digits.size())) +
                           "_" + base);
    }
    return make_number(std::move(value));
  }

  // The subscript after '_': a braced group's text or one character.
  std::string read_subscript() {
    skip_ws();
    if (peek() == '{') {
      size_t depth = 0, start = pos_ + 1;
      while (pos_ < s_.size()) {
        if (s_[pos_] == '{') ++depth;
        if (s_[pos_] == '}' && --depth == 0) break;
        ++pos_;
      }
      if (pos_ >= s_.size()) error("unclosed subscript");
      std::string text(s_.substr(start, pos_ - start));
      ++pos_;
      std::string compact;
      for (char ch : text)
        if (!std::isspace(static_cast<unsigned char>(ch))) compact += ch;
      return compact;
    }
    if (at_end()) error("missing subscript");
    return std::string(1, s_[pos_++]);
  }

  // A LaTeX argument: a braced group, or one token (a digit, a letter, or a command).
  ExprPtr parse_tex_argument() {
    DepthGuard guard(*this);
    skip_ws();
    char c = peek();
    if (c == '{') return parse_primary();
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++pos_;
      return make_number(Rational(c - '0'));
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      ++pos_;
      return c == 'e' ? node(Kind::e, {}) : make_variable(std::string(1, c));
    }
    if (c == '\\') return parse_primary();
    error("missing argument");
  }

  // The argument of a function: (x), {x}, or an unbracketed product such as \sin 2x.
  ExprPtr parse_function_argument() {
    DepthGuard guard(*this);
    skip_ws();
    if (peek() == '(' || peek() == '{') return parse_postfix(parse_primary());
    std::vector<ExprPtr> factors{parse_signed_factor()};
    for (;;) {
      skip_ws();
      if (peek() == '\\' && is_function_name(peek_command())) break;
      if (!starts_factor() || peek() == '(') break;
      if (std::isalpha(static_cast<unsigned char>(peek())) && function_at_letters()) break;
      factors.push_back(parse_power());
    }
    return factors.size() == 1 ? factors[0] : node(Kind::mul, std::move(factors));
  }

  bool function_at_letters() const {
    for (auto f : kFunctions)
      if (s_.substr(pos_, f.size()) == f) return true;
    return false;
  }

  ExprPtr parse_function(std::string name) {
    if (name == "lg") name = "log";
    if (name == "sqrt") {
      skip_ws();
      ExprPtr x = (peek() == '(' || peek() == '{') ? parse_primary() : parse_tex_argument();
      return node(Kind::root, {x, make_number(2)});
    }
    // \log_b x: a base; \sin^2 x: a power of the function's value.
    ExprPtr base;
    ExprPtr power;
    for (int i = 0; i < 2; ++i) {
      skip_ws();
      if (peek() == '_' && !base) {
        ++pos_;
        skip_ws();
        base = peek() == '{' ? parse_primary() : parse_tex_argument();
      } else if (peek() == '^' && !power) {
        ++pos_;
        power = parse_exponent();
      }
    }
    ExprPtr x = parse_function_argument();
    std::vector<ExprPtr> args{x};
    if (base) {
      if (name != "log") error("subscript on a function");
      args.push_back(base);
    }
    ExprPtr f = node(Kind::function, std::move(args), name);
    if (power) {
      // \sin^{-1} x is arcsin x.
      if (power->kind == Kind::neg && power->args[0]->kind == Kind::number &&
          power->args[0]->value == 1 && (name == "sin" || name == "cos" || name == "tan")) {
        return node(Kind::function, {x}, "arc" + name);
      }
      f = node(Kind::pow, {f, power});
    }
    return f;
  }

  ExprPtr parse_group(char close) {
    ExprPtr inner = parse_sum();
    expect(close);
    return inner;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    skip_ws();
    char c = peek();
    if (c == '\0') error("unexpected end");
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))))
      return parse_number();
    if (c == '(') {
      ++pos_;
      return parse_group(')');
    }
    if (c == '[') {
      ++pos_;
      return parse_group(']');
    }
    if (c == '{') {
      ++pos_;
      return parse_group('}');
    }
    if (c == '|') {
      ++pos_;
      ExprPtr inner = parse_sum();
      expect('|');
      return node(Kind::abs, {inner});
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      for (auto f : kFunctions) {
        if (s_.substr(pos_, f.size()) == f) {
          pos_ += f.size();
          return parse_function(std::string(f));
        }
      }
      if (s_.substr(pos_, 2) == "pi" && !std::isalpha(static_cast<unsigned char>(peek(2)))) {
        pos_ += 2;
        return node(Kind::pi, {});
      }
      ++pos_;
      if (c == 'e') return node(Kind::e, {});
      std::string name(1, c);
      if (peek() == '_') {
        ++pos_;
        name += "_" + read_subscript();
      }
      return make_variable(name);
    }
    if (c == '\\') {
      std::string cmd(peek_command());
      consume_command();
      if (cmd == "frac") {
        ExprPtr num = parse_tex_argument();
        ExprPtr den = parse_tex_argument();
        return node(Kind::div, {num, den});
      }
      if (cmd == "binom") {
        ExprPtr n = parse_tex_argument();
        ExprPtr k = parse_tex_argument();
        return node(Kind::binomial, {n, k});
      }
      if (cmd == "sqrt") {
        skip_ws();
        ExprPtr index = make_number(2);
        if (peek() == '[') {
          ++pos_;
          index = parse_group(']');
        }
        ExprPtr x = parse_tex_argument();
        return node(Kind::root, {x, index});
      }
      if (cmd == "pi") return node(Kind::pi, {});
      if (cmd == "infty") return node(Kind::infinity, {});
      if (cmd == "operatorname") {
        skip_ws();
        if (peek() != '{') error("bad \\operatorname");
        size_t close = s_.find('}', pos_);
        if (close == std::string_view::npos) error("bad \\operatorname");
        std::string name(s_.substr(pos_ + 1, close - pos_ - 1));
        pos_ = close + 1;
        if (!is_function_name(name)) error("unknown function");
        return parse_function(name);
      }
      if (is_function_name(cmd)) return parse_function(cmd);
      if (is_greek(cmd)) {
        std::string name = cmd;
        if (name == "varepsilon") name = "epsilon";
        if (name == "vartheta") name = "theta";
        if (name == "varphi") name = "phi";
        if (peek() == '_') {
          ++pos_;
          name += "_" + read_subscript();
        }
        return make_variable(name);
      }
      error("unknown command");
    }
    error("unexpected character");
  }

  std::string_view s_;
  Budget& budget_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

ExprPtr parse_latex(std::string_view text, Budget& budget) {
  if (text.size() > kMaxAnswerChars) throw ParseError("answer too long");
  Parser parser(text, budget);
  return parser.parse_all();
}

}  // namespace rqat::eval
