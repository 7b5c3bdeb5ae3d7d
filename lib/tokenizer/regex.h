// Pre-tokenizer regexes on PCRE2 (JIT, UTF and Unicode properties), behaving like the Oniguruma
// regexes Hugging Face `tokenizers` compiles: \s is exactly Unicode White_Space and ^/$ match at
// line breaks, as in Oniguruma's default syntax.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rqat::tokenizer {

class Regex {
 public:
  // `literal`: the pattern is a plain string (tokenizer.json's {"String": ...}). `where` names the
  // file and field for errors.
  Regex(std::string_view pattern, bool literal, const std::string& where);

  // Appends the [begin, end) byte ranges of all non-overlapping matches, left to right.
  // `text` must be valid UTF-8.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

// The pattern with \s and \S spelled out as the White_Space set (PCRE2's \s differs at U+180E).
std::string translate_pattern(std::string_view pattern);

}  // namespace rqat::tokenizer
