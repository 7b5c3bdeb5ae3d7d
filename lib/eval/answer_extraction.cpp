// Answer extraction from completions: plain forward/backward scans (no regex), so a 100 kB
// completion costs linear time.
#include "eval/answer_extraction.h"

#include <algorithm>
#include <cctype>

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

// Content after \boxed at `pos` (pointing just past the command name), or nullopt when unclosed.
std::optional<std::string> boxed_content(std::string_view text, size_t pos) {
  size_t i = pos;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && text[i] == '{') {
    size_t close = matching_brace(text, i);
    if (close == std::string_view::npos) return std::nullopt;
    return trim(text.substr(i + 1, close - i - 1));
  }
  if (i == pos) return std::nullopt;  // \boxedfoo is another command
  // "\boxed 5": up to whitespace, '$' or the end.
  size_t end = i;
  while (end < text.size() && !is_space(text[end]) && text[end] != '$') ++end;
  if (end == i) return std::nullopt;
  return trim(text.substr(i, end - i));
}

}  // namespace

std::string_view strip_thinking(std::string_view completion) {
  constexpr std::string_view kClose = "</think>";
  size_t pos = completion.rfind(kClose);
  if (pos == std::string_view::npos) return completion;
  return completion.substr(pos + kClose.size());
}

std::optional<std::string> last_boxed(std::string_view text) {
  // A box whose brace at i never closes means the text from i on never returns to depth 0, so no
  // earlier box can close after i either: later scans stop at `limit`. Every character is then
  // scanned once even when a degenerate completion holds thousands of unclosed \boxed{.
  size_t limit = text.size();
  size_t search = text.size();
  while (search > 0) {
    size_t a = text.rfind("\\boxed", search - 1);
    size_t b = text.rfind("\\fbox", search - 1);
    size_t pos;
    size_t len;
    if (a == std::string_view::npos && b == std::string_view::npos) return std::nullopt;
    if (b == std::string_view::npos || (a != std::string_view::npos && a > b)) {
      pos = a;
      len = 6;
    } else {
      pos = b;
      len = 5;
    }
    const std::string_view bounded = text.substr(0, std::max(limit, pos + len));
    if (auto content = boxed_content(bounded, pos + len); content && !content->empty())
      return content;
    size_t brace = pos + len;
    while (brace < bounded.size() && bounded[brace] == ' ') ++brace;
    if (brace < bounded.size() && bounded[brace] == '{' &&
        matching_brace(bounded, brace) == std::string_view::npos)
      limit = brace;
    if (pos == 0) return std::nullopt;
    search = pos;
  }
  return std::nullopt;
}

std::optional<std::string> answer_phrase(std::string_view text) {
  std::string low = lower(text);
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
  // Markdown emphasis, a leading colon, math delimiters and a final period.
  auto strip = [](std::string& s, std::string_view what) {
    while (s.size() >= what.size() && s.compare(0, what.size(), what) == 0)
      s = trim(s.substr(what.size()));
    while (s.size() >= what.size() && s.compare(s.size() - what.size(), what.size(), what) == 0)
      s = trim(s.substr(0, s.size() - what.size()));
  };
  for (int round = 0; round < 2; ++round) {
    strip(rest, "**");
    strip(rest, ":");
    strip(rest, ".");
    strip(rest, "$");
    if (rest.rfind("\\(", 0) == 0 && rest.size() >= 4 &&
        rest.compare(rest.size() - 2, 2, "\\)") == 0)
      rest = trim(rest.substr(2, rest.size() - 4));
    if (rest.rfind("\\[", 0) == 0 && rest.size() >= 4 &&
        rest.compare(rest.size() - 2, 2, "\\]") == 0)
      rest = trim(rest.substr(2, rest.size() - 4));
  }
  if (rest.empty()) return std::nullopt;
  if (auto boxed = last_boxed(rest)) return boxed;
  return rest;
}

std::optional<std::string> last_number(std::string_view text) {
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

std::optional<std::string> extract_answer(std::string_view completion) {
  std::string_view text = strip_thinking(completion);
  if (auto boxed = last_boxed(text)) return boxed;
  if (auto phrase = answer_phrase(text)) return phrase;
  return last_number(text);
}

}  // namespace rqat::eval
