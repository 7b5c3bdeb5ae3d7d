// See added_tokens.h. Matching walks the text once and, at each position whose byte starts some
// token, tries that byte's candidates longest first: the leftmost-longest result of tokenizers'
// Aho-Corasick automaton without building one (models have tens of added tokens, not thousands).
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace rqat::tokenizer {
namespace {

// Byte offset where the trailing whitespace of s begins (regex \s*$).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t start = utf8::previous_start(s, end);
    char32_t cp = 0;
    if (utf8::decode(s, start, cp) == 0 || !utf8::is_white_space(cp)) break;
    end = start;
  }
  return end;
}

// Length of the leading whitespace of s (regex ^\s*).
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const size_t n = utf8::decode(s, i, cp);
    if (n == 0 || !utf8::is_white_space(cp)) break;
    i += n;
  }
  return i;
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  char32_t cp = 0;
  return utf8::decode(s, utf8::previous_start(s, s.size()), cp) > 0 && utf8::is_word_char(cp);
}

bool starts_with_word(std::string_view s) {
  char32_t cp = 0;
  return !s.empty() && utf8::decode(s, 0, cp) > 0 && utf8::is_word_char(cp);
}

}  // namespace

void AddedVocabulary::add(const AddedToken& token) {
  if (const auto it = by_content_.find(token.content); it != by_content_.end()) {
    const size_t index = by_id_.at(it->second);
    by_id_.erase(it->second);
    tokens_[index] = token;
    by_id_[token.id] = index;
    it->second = token.id;
    return;
  }
  by_id_[token.id] = tokens_.size();
  by_content_.emplace(token.content, token.id);
  tokens_.push_back(token);
}

void AddedVocabulary::finish(const Normalizer& normalizer) {
  raw_ = Matcher{};
  normalized_ = Matcher{};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;
    std::string pattern = t.content;
    if (t.normalized) {
      std::string scratch;
      pattern = std::string(normalizer.apply(t.content, scratch));
    }
    Matcher& m = t.normalized ? normalized_ : raw_;
    m.by_first_byte[static_cast<unsigned char>(pattern[0])].emplace_back(std::move(pattern), i);
    m.empty = false;
  }
  for (Matcher* m : {&raw_, &normalized_}) {
    for (auto& list : m->by_first_byte) {
      std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
        return a.first.size() > b.first.size();
      });
    }
  }
}

const AddedToken* AddedVocabulary::find_id(TokenId id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<TokenId> AddedVocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Piece>& out) const {
  const Matcher& m = normalized ? normalized_ : raw_;
  if (text.empty()) return;
  if (m.empty) {
    out.push_back({text, std::nullopt});
    return;
  }
  size_t start_offset = 0;  // end of the previous accepted token
  size_t pos = 0;           // where the search for the next match resumes
  while (pos < text.size()) {
    const auto& candidates = m.by_first_byte[static_cast<unsigned char>(text[pos])];
    const std::pair<std::string, size_t>* hit = nullptr;
    for (const auto& c : candidates) {
      if (text.compare(pos, c.first.size(), c.first) == 0) {
        hit = &c;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->first.size();
    pos = stop;  // matches never overlap, even when a token below is discarded
    const AddedToken& token = tokens_[hit->second];
    if (token.single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start)
      out.push_back({text.substr(start_offset, start - start_offset), std::nullopt});
    out.push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), std::nullopt});
}

}  // namespace rqat::tokenizer
