// Answer extraction from completions: plain forward/backward scans (no regex), each character read
// a bounded number of times, so a 1 MB completion of repeated markers costs linear time.
#include "eval/answer_extraction.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "eval/normalize.h"
#include "eval/text_util.h"

namespace rqat::eval {

namespace {

using namespace text;  // is_alpha, is_digit, is_space, trim, ...

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

void charge(Budget* budget, size_t chars) {
  if (budget) budget->scan(chars);
}

// "\boxed" / "\fbox" at text[at] (a backslash): the length of the command, else 0.
size_t box_command_length(std::string_view text, size_t at) {
  for (std::string_view name : {"boxed", "fbox"})
    if (text.substr(at + 1, name.size()) == name) return name.size() + 1;
  return 0;
}

struct BoxScan {
  std::optional<std::string> content;  // nullopt when the box has none (unclosed, \boxedfoo)
  size_t unclosed_brace = std::string_view::npos;  // its '{' when that brace never closes
  size_t scanned = 0;                              // characters read, for the budget
  size_t end = 0;                                  // one past the box (when it has content)
};

// The box whose command name ends at `after_name`: "\boxed{...}" (nested braces matched) or
// "\boxed 5" (up to whitespace or '$').
BoxScan scan_box(std::string_view text, size_t after_name) {
  BoxScan scan;
  size_t i = after_name;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && text[i] == '{') {
    const size_t close = matching_brace(text, i);
    scan.scanned = (close == std::string_view::npos ? text.size() : close) - after_name;
    if (close == std::string_view::npos) {
      scan.unclosed_brace = i;
    } else {
      scan.content = trim(text.substr(i + 1, close - i - 1));
      scan.end = close + 1;
    }
    return scan;
  }
  scan.scanned = i - after_name;
  if (i == after_name) return scan;  // \boxedfoo is another command
  size_t end = i;
  while (end < text.size() && !is_space(text[end]) && text[end] != '$') ++end;
  scan.scanned = end - after_name;
  scan.end = end;
  if (end > i) scan.content = trim(text.substr(i, end - i));
  return scan;
}

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Removes `what` repeatedly from both ends of `s` (on a view, copying once: a line of a million
// '$' must not be copied a million times).
void strip_both_ends(std::string& s, std::string_view what) {
  std::string_view v = s;
  while (v.starts_with(what)) v = trim_view(v.substr(what.size()));
  while (v.ends_with(what)) v = trim_view(v.substr(0, v.size() - what.size()));
  if (v.size() != s.size()) s = std::string(v);
}

void strip_trailing(std::string& s, char c) {
  std::string_view v = s;
  while (!v.empty() && v.back() == c) v = trim_view(v.substr(0, v.size() - 1));
  if (v.size() != s.size()) s = std::string(v);
}

// "**$X$.**" -> "X": emphasis, colons, dollar signs and \(..\) / \[..\] around the answer, and
// periods after it (only after: ".5" is a number).
void strip_delimiters(std::string& s) {
  for (int round = 0; round < 2; ++round) {
    strip_both_ends(s, "**");
    strip_both_ends(s, ":");
    strip_trailing(s, '.');
    strip_both_ends(s, "$");
    if (s.rfind("\\(", 0) == 0 && s.size() >= 4 && s.compare(s.size() - 2, 2, "\\)") == 0)
      s = trim(s.substr(2, s.size() - 4));
    if (s.rfind("\\[", 0) == 0 && s.size() >= 4 && s.compare(s.size() - 2, 2, "\\]") == 0)
      s = trim(s.substr(2, s.size() - 4));
  }
}

// Minerva's closing sentence (its prompt's format, kept by many fine-tuned models) is not part of
// the answer: "5. I hope it is correct." -> "5.".
void drop_closing_remark(std::string& s) {
  constexpr std::string_view kRemark = "i hope it is correct";
  const size_t at = lower(s).rfind(kRemark);
  if (at != std::string::npos) s = trim(std::string_view(s).substr(0, at));
}

// "$X$. More prose" -> X: an answer that opens with one math span followed by prose without math.
// "$2$ and $3$" is left alone (its later spans belong to the answer).
std::optional<std::string> leading_math_span(std::string_view s) {
  for (auto [open, close] : {std::pair<std::string_view, std::string_view>{"$$", "$$"},
                             {"$", "$"},
                             {"\\(", "\\)"},
                             {"\\[", "\\]"}}) {
    if (s.substr(0, open.size()) != open) continue;
    const size_t end = s.find(close, open.size());
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view after = s.substr(end + close.size());
    if (after.find('$') != std::string_view::npos || after.find("\\(") != std::string_view::npos)
      return std::nullopt;
    std::string inner = trim(s.substr(open.size(), end - open.size()));
    if (inner.empty()) return std::nullopt;
    return inner;
  }
  return std::nullopt;
}

}  // namespace

std::string_view strip_thinking(std::string_view completion) {
  constexpr std::string_view kClose = "</think>";
  size_t pos = completion.rfind(kClose);
  if (pos == std::string_view::npos) return completion;
  return completion.substr(pos + kClose.size());
}

namespace {

struct FoundBox {
  std::string content;
  size_t start = 0;  // the backslash of \boxed
  size_t end = 0;    // one past the box's last character
};

std::optional<FoundBox> find_last_box(std::string_view text, Budget* budget) {
  // Boxes are tried from the last one back, found by one backward scan over backslashes (searching
  // each command name separately from every box back to the start was quadratic in the number of
  // boxes). A box whose brace at i never closes means the text from i on never returns to depth 0,
  // so no earlier box can close after i either: later scans stop at `limit`. The regions scanned
  // for unclosed or empty boxes are then disjoint, and the whole search is linear.
  size_t limit = text.size();
  for (size_t end = text.size(); end > 0;) {
    const size_t at = text.rfind('\\', end - 1);
    charge(budget, end - (at == std::string_view::npos ? 0 : at));
    if (at == std::string_view::npos) break;
    end = at;
    const size_t name = box_command_length(text, at);
    if (name == 0) continue;
    const std::string_view bounded = text.substr(0, std::max(limit, at + name));
    BoxScan box = scan_box(bounded, at + name);
    charge(budget, box.scanned);
    if (box.content && !box.content->empty())
      return FoundBox{std::move(*box.content), at, box.end};
    if (box.unclosed_brace != std::string_view::npos) limit = box.unclosed_brace;
  }
  return std::nullopt;
}

// What may stand between two boxes that together give one answer ("$\boxed{1}$ and
// $\boxed{2}$", "$x = \boxed{-2}$ or $x = \boxed{6}$"): math delimiters, spaces, commas and
// semicolons, "and" / "or", and "x =" before the next box. Anything else ("then", a period, a
// number) separates a revised answer from an earlier one, and only the last box counts.
bool joins_boxes(std::string_view between) {
  std::string_view s = between;
  auto skip_fillers = [&] {
    while (!s.empty()) {
      const char c = s.front();
      if (is_space(c) || c == '$' || c == ',' || c == ';' || c == '{' || c == '}') {
        s.remove_prefix(1);
      } else if (s.starts_with("\\(") || s.starts_with("\\)")) {
        s.remove_prefix(2);
      } else if (s.starts_with("\\text")) {
        s.remove_prefix(5);
      } else {
        return;
      }
    }
  };
  skip_fillers();
  for (std::string_view word : {"and", "or"}) {
    if (s.starts_with(word) && (s.size() == word.size() || !is_alpha(s[word.size()]))) {
      s.remove_prefix(word.size());
      break;
    }
  }
  skip_fillers();
  // An optional "x =" (one letter, optionally subscripted) right before the next box.
  if (!s.empty() && is_alpha(s.front())) {
    std::string_view rest = s.substr(1);
    if (rest.starts_with("_") && rest.size() > 1) rest.remove_prefix(2);
    rest = trim_view(rest);
    if (rest.starts_with("=")) s = trim_view(rest.substr(1));
  }
  return s.empty();
}

// At most this many boxes are read as one answer; a longer run is a degenerate repetition.
constexpr int kMaxJoinedBoxes = 16;
// The longest text between two boxes that can still join them ("$ or $x = ").
constexpr size_t kMaxBoxJoiner = 40;

}  // namespace

std::optional<std::string> last_boxed(std::string_view text, Budget* budget) {
  auto box = find_last_box(text, budget);
  if (!box) return std::nullopt;
  return std::move(box->content);
}

std::optional<std::string> final_boxes(std::string_view text, Budget* budget) {
  auto last = find_last_box(text, budget);
  if (!last) return std::nullopt;
  std::vector<std::string> items{last->content};
  size_t start = last->start;
  while (true) {
    // The text before this box, back to the previous box's closing brace, must be a joiner.
    size_t brace = text.rfind('}', start == 0 ? 0 : start - 1);
    if (start == 0 || brace == std::string_view::npos || start - brace > kMaxBoxJoiner) break;
    charge(budget, start - brace);
    auto previous = find_last_box(text.substr(0, brace + 1), budget);
    if (!previous || previous->end != brace + 1) break;
    if (!joins_boxes(text.substr(previous->end, start - previous->end))) break;
    items.push_back(std::move(previous->content));
    start = previous->start;
    if (items.size() > kMaxJoinedBoxes) return std::move(last->content);
  }
  std::string joined;
  for (auto it = items.rbegin(); it != items.rend(); ++it) joined += (joined.empty() ? "" : ", ") + *it;
  return joined;
}

namespace {

// Where the answer after the last answer phrase starts: "answer is", "answer:" (covering "the final
// answer is", "Final Answer:"), or a "Final Answer" heading ("**Final Answer**" alone on its line,
// the answer on the next lines). npos when there is none.
size_t after_answer_phrase(std::string_view low) {
  size_t best = std::string::npos;
  size_t best_end = 0;
  for (std::string_view phrase : {"answer is", "answer:"}) {
    const size_t pos = low.rfind(phrase);
    if (pos != std::string::npos && (best == std::string::npos || pos > best)) {
      best = pos;
      best_end = pos + phrase.size();
    }
  }
  constexpr std::string_view kHeading = "final answer";
  const size_t heading = low.rfind(kHeading);
  if (heading != std::string::npos && (best == std::string::npos || heading > best)) {
    size_t i = heading + kHeading.size();
    while (i < low.size() && (low[i] == ' ' || low[i] == '*' || low[i] == '#' || low[i] == ':')) ++i;
    if (i < low.size() && low[i] == '\n') return i;
  }
  return best == std::string::npos ? std::string::npos : best_end;
}

// A display block that opens the answer and may span lines: "\[ ... \]" or "$$ ... $$".
std::optional<std::string> leading_display(std::string_view s) {
  for (auto [open, close] : {std::pair<std::string_view, std::string_view>{"\\[", "\\]"}, {"$$", "$$"}}) {
    if (!s.starts_with(open)) continue;
    const size_t end = s.find(close, open.size());
    if (end == std::string_view::npos) return std::nullopt;
    std::string inner = trim(s.substr(open.size(), end - open.size()));
    if (!inner.empty()) return inner;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> answer_phrase(std::string_view text, Budget* budget) {
  charge(budget, text.size());
  const std::string low = lower(text);
  size_t from = after_answer_phrase(low);
  if (from == std::string::npos) return std::nullopt;
  // The answer may follow on the next line(s) ("The final answer is:\n\[ x \]").
  size_t first = from;
  while (first < text.size() && (text[first] == ' ' || text[first] == '*' || text[first] == ':')) ++first;
  if (first < text.size() && text[first] == '\n') {
    while (first < text.size() && (is_space(text[first]) || text[first] == '*')) ++first;
    if (auto display = leading_display(text.substr(first))) {
      if (auto boxed = last_boxed(*display, budget)) return boxed;
      return display;
    }
    from = first;
  }
  size_t end = text.find('\n', from);
  std::string rest = trim(text.substr(
      from, end == std::string_view::npos ? std::string_view::npos : end - from));
  drop_closing_remark(rest);
  // Markdown emphasis and a leading colon, then either one leading math span (taken as written)
  // or the loose rules: math delimiters at both ends and final periods.
  for (int round = 0; round < 2; ++round) {
    strip_both_ends(rest, "**");
    strip_both_ends(rest, ":");
  }
  if (auto span = leading_math_span(rest)) {
    rest = std::move(*span);
  } else {
    strip_delimiters(rest);
  }
  if (rest.empty()) return std::nullopt;
  if (auto boxed = last_boxed(rest, budget)) return boxed;
  return rest;
}

namespace {

// A word of three or more letters outside braces and not a command name: prose, not math.
bool has_bare_word(std::string_view s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && depth > 0) --depth;
    if (!is_alpha(s[i])) continue;
    size_t j = i;
    while (j < s.size() && is_alpha(s[j])) ++j;
    if (depth == 0 && j - i >= 3 && (i == 0 || s[i - 1] != '\\')) return true;
    i = j - 1;
  }
  return false;
}

// "$5 and got $" is two amounts of money, not a math span: a single-dollar span that ends in a
// space (TeX writers close math right after it) or that opens with a number followed by prose.
bool looks_like_money(std::string_view content) {
  if (content.empty()) return true;
  if (is_space(content.back())) return true;
  return is_digit(content.front()) && has_bare_word(content);
}

struct Span {
  std::string content;
  size_t end = 0;  // one past the closing delimiter
};

// The last unescaped '$' before `limit` ("\$" is money, not a delimiter), or npos.
size_t last_dollar(std::string_view text, size_t limit) {
  for (size_t at = limit; at > 0;) {
    at = text.rfind('$', at - 1);
    if (at == std::string_view::npos) return at;
    if (at == 0 || text[at - 1] != '\\') return at;
  }
  return std::string_view::npos;
}

// The last occurrence of a delimiter starting before a falling limit. The search result is kept
// while it is still before the limit (and "none" stays none), so the scans for each delimiter
// cover the text once in total however many spans are skipped: a megabyte of "$5 and $6" or of
// '$' must stay linear.
class LastBefore {
 public:
  LastBefore(std::string_view text, std::string_view what) : text_(text), what_(what) {}
  size_t operator()(size_t limit) {
    if (searched_ && (found_ == std::string_view::npos || found_ + what_.size() <= limit))
      return found_;
    found_ = limit >= what_.size() ? text_.rfind(what_, limit - what_.size()) : std::string_view::npos;
    searched_ = true;
    return found_;
  }

 private:
  std::string_view text_, what_;
  size_t found_ = std::string_view::npos;
  bool searched_ = false;
};

// The last complete math span of the text: $...$, $$...$$, \(...\) or \[...\], found from the end.
std::optional<Span> find_last_math_span(std::string_view text) {
  constexpr size_t npos = std::string_view::npos;
  LastBefore last_paren(text, "\\)"), last_bracket(text, "\\]");
  for (size_t limit = text.size(); limit > 0;) {
    const size_t dollar = last_dollar(text, limit);
    const size_t paren = last_paren(limit);
    const size_t bracket = last_bracket(limit);
    size_t close = npos;
    for (size_t c : {dollar, paren, bracket})
      if (c != npos && (close == npos || c > close)) close = c;
    if (close == npos) return std::nullopt;
    if (close == paren || close == bracket) {
      const size_t open = text.rfind(close == paren ? "\\(" : "\\[", close);
      if (open == npos) return std::nullopt;
      std::string inner = trim(text.substr(open + 2, close - open - 2));
      if (!inner.empty()) return Span{std::move(inner), close + 2};
      limit = open;
      continue;
    }
    if (close > 0 && text[close - 1] == '$') {  // $$...$$
      const size_t open = close >= 3 ? text.rfind("$$", close - 3) : npos;
      if (open == npos) return std::nullopt;
      std::string inner = trim(text.substr(open + 2, close - 1 - (open + 2)));
      if (!inner.empty()) return Span{std::move(inner), close + 1};
      limit = open;
      continue;
    }
    const size_t open = last_dollar(text, close);
    if (open == npos) return std::nullopt;
    const std::string_view content = text.substr(open + 1, close - open - 1);
    if (!looks_like_money(content) && !trim(content).empty()) return Span{trim(content), close + 1};
    limit = open;
  }
  return std::nullopt;
}

constexpr size_t kShortCompletion = 48;

}  // namespace

std::optional<std::string> last_math_span(std::string_view text, Budget* budget) {
  charge(budget, text.size());
  auto span = find_last_math_span(text);
  if (!span) return std::nullopt;
  // A number after the span is a later answer ("... $\frac13$, about 0.33"): the span is not last.
  for (size_t i = span->end; i < text.size(); ++i)
    if (is_digit(text[i])) return std::nullopt;
  return std::move(span->content);
}

std::optional<std::string> short_answer_text(std::string_view text) {
  std::string s = trim(text);
  if (s.empty() || s.size() > kShortCompletion || s.find('\n') != std::string::npos) return std::nullopt;
  strip_delimiters(s);
  if (s.empty() || has_bare_word(s)) return std::nullopt;
  // Only math characters: "#### 27" or "Q: 5" is a marker and a number, read by last_number.
  constexpr std::string_view kMath = "+-*/^()[]{}.,=<>|!\\_$' &";
  for (char c : s)
    if (!is_alpha(c) && !is_digit(c) && kMath.find(c) == std::string_view::npos) return std::nullopt;
  return s;
}

std::optional<std::string> last_number(std::string_view text, Budget* budget) {
  charge(budget, text.size());
  size_t i = text.size();
  while (i > 0) {
    --i;
    if (!is_digit(text[i])) continue;
    // text[i] is the last digit of the last number; walk back over digits, commas between digit
    // groups and one decimal point.
    size_t end = i + 1;
    size_t start = i;
    while (start > 0) {
      char c = text[start - 1];
      if (is_digit(c)) {
        --start;
      } else if ((c == ',' || c == '.') && start >= 2 && is_digit(text[start - 2])) {
        --start;
      } else {
        break;
      }
    }
    std::string number(text.substr(start, end - start));
    bool negative =
        start > 0 && text[start - 1] == '-' && (start < 2 || !is_digit(text[start - 2]));
    // Keep commas only as thousands separators: drop them when every group after one has 3 digits.
    std::string out;
    size_t comma = number.rfind(',');
    if (comma != std::string::npos) {
      bool groups_ok = true;
      size_t prev = 0;
      size_t first = number.find(',');
      if (first > 3) groups_ok = false;
      for (size_t p = first; p != std::string::npos; p = number.find(',', p + 1)) {
        size_t next = number.find_first_of(",.", p + 1);
        size_t len = (next == std::string::npos ? number.size() : next) - p - 1;
        if (len != 3) groups_ok = false;
        prev = p;
      }
      (void)prev;
      if (!groups_ok) number = number.substr(comma + 1);  // "1,2" is a list: its last item
      std::erase(number, ',');
    }
    size_t point = number.find('.');
    if (point != std::string::npos && number.find('.', point + 1) != std::string::npos)
      number = number.substr(number.rfind('.') + 1);  // "1.2.3" (a section number): the last part
    out = (negative ? "-" : "") + number;
    return out;
  }
  return std::nullopt;
}

std::optional<std::string> gsm8k_gold(std::string_view solution) {
  size_t pos = solution.rfind("####");
  if (pos == std::string_view::npos) return std::nullopt;
  std::string gold = trim(solution.substr(pos + 4));
  std::erase(gold, ',');
  if (gold.empty()) return std::nullopt;
  return gold;
}

std::optional<std::string> extract_answer(std::string_view completion, Budget* budget) {
  std::string_view text = strip_thinking(completion);
  if (auto boxed = final_boxes(text, budget)) return boxed;
  if (auto phrase = answer_phrase(text, budget)) return phrase;
  if (auto span = last_math_span(text, budget)) return span;
  if (auto whole = short_answer_text(text)) return whole;
  return last_number(text, budget);
}

}  // namespace rqat::eval
