// Answer extraction from completions: plain forward/backward scans (no regex), each character read
// a bounded number of times, so a 1 MB completion of repeated markers costs linear time.
#include "eval/answer_extraction.h"

#include <algorithm>
#include <cctype>
#include <utility>

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
    if (close == std::string_view::npos)
      scan.unclosed_brace = i;
    else
      scan.content = trim(text.substr(i + 1, close - i - 1));
    return scan;
  }
  scan.scanned = i - after_name;
  if (i == after_name) return scan;  // \boxedfoo is another command
  size_t end = i;
  while (end < text.size() && !is_space(text[end]) && text[end] != '$') ++end;
  scan.scanned = end - after_name;
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

std::optional<std::string> last_boxed(std::string_view text, Budget* budget) {
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
    if (box.content && !box.content->empty()) return std::move(box.content);
    if (box.unclosed_brace != std::string_view::npos) limit = box.unclosed_brace;
  }
  return std::nullopt;
}

std::optional<std::string> answer_phrase(std::string_view text, Budget* budget) {
  charge(budget, text.size());
  const std::string low = lower(text);
  size_t best = std::string::npos;
  size_t best_end = 0;
  for (std::string_view phrase : {"answer is", "answer:", "answer is:"}) {
    size_t pos = low.rfind(phrase);
    if (pos != std::string::npos && (best == std::string::npos || pos > best)) {
      best = pos;
      best_end = pos + phrase.size();
    }
  }
  if (best == std::string::npos) return std::nullopt;
  size_t end = text.find('\n', best_end);
  std::string rest = trim(text.substr(
      best_end, end == std::string_view::npos ? std::string_view::npos : end - best_end));
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
  if (auto boxed = last_boxed(text, budget)) return boxed;
  if (auto phrase = answer_phrase(text, budget)) return phrase;
  return last_number(text, budget);
}

}  // namespace rqat::eval
