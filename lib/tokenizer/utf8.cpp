// See utf8.h. The validation table follows the Unicode standard's well-formed byte sequences
// (Table 3-7), which is also what defines the "maximal subpart" replaced by one U+FFFD.
#include "tokenizer/utf8.h"

#include <utf8proc.h>

namespace rqat::tokenizer::utf8 {
namespace {

// Allowed range of the second byte for a lead byte, and the total sequence length (0: invalid
// lead).
struct Lead {
  unsigned char lo, hi;
  int length;
};

Lead lead_info(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF, 2};
  if (b == 0xE0) return {0xA0, 0xBF, 3};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {0x80, 0xBF, 3};
  if (b == 0xED) return {0x80, 0x9F, 3};
  if (b == 0xF0) return {0x90, 0xBF, 4};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF, 4};
  if (b == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};
}

// How many bytes from s[i] form a valid prefix of a sequence (the maximal subpart), and whether
// that prefix is the complete sequence.
size_t valid_run(std::string_view s, size_t i, bool& complete) {
  const auto b = static_cast<unsigned char>(s[i]);
  complete = false;
  if (b < 0x80) {
    complete = true;
    return 1;
  }
  const Lead lead = lead_info(b);
  if (lead.length == 0) return 1;
  size_t n = 1;
  for (; n < static_cast<size_t>(lead.length); ++n) {
    if (i + n >= s.size()) return n;
    const auto c = static_cast<unsigned char>(s[i + n]);
    const unsigned char lo = n == 1 ? lead.lo : 0x80, hi = n == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) return n;
  }
  complete = true;
  return n;
}

}  // namespace

size_t decode(std::string_view s, size_t i, char32_t& cp) {
  bool complete = false;
  const size_t n = valid_run(s, i, complete);
  if (!complete) return 0;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (n == 1) {
    cp = b0;
    return 1;
  }
  char32_t value = b0 & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k)
    value = (value << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  cp = value;
  return n;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete = false;
    const size_t n = valid_run(s, i, complete);
    if (!complete) return false;
    i += n;
  }
  return true;
}

std::string to_valid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const size_t n = valid_run(bytes, i, complete);
    if (complete) {
      out.append(bytes.substr(i, n));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += n;
  }
  return out;
}

size_t complete_prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const size_t n = valid_run(bytes, i, complete);
    // A truncated but so far valid sequence at the very end may still be completed.
    if (!complete && i + n == bytes.size() &&
        lead_info(static_cast<unsigned char>(bytes[i])).length > 0 &&
        n < static_cast<size_t>(lead_info(static_cast<unsigned char>(bytes[i])).length)) {
      return i;
    }
    i += n;
  }
  return bytes.size();
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

size_t previous_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace rqat::tokenizer::utf8
