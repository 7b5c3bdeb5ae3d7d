// See added_tokens.h. Matching walks the text once and, at each position whose byte starts some
// token, walks the trie of the patterns as far as the text follows it, keeping the longest pattern
// passed: the leftmost-longest result of tokenizers' Aho-Corasick automaton, in at most (longest
// pattern) steps per position, as there.
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
    const size_t index = it->second;
    const auto old_id = by_id_.find(tokens_[index].id);
    if (old_id != by_id_.end() && old_id->second == index) by_id_.erase(old_id);
    tokens_[index] = token;
    by_id_[token.id] = index;
    return;
  }
  by_id_[token.id] = tokens_.size();
  by_content_.emplace(token.content, tokens_.size());
  tokens_.push_back(token);
}

void AddedVocabulary::Matcher::insert(std::string_view pattern, size_t token) {
  uint32_t node = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const auto byte = static_cast<unsigned char>(pattern[i]);
    uint32_t next = 0;
    if (node == 0) {
      next = root_children[byte];
    } else {
      for (const auto& [b, child] : nodes[node].children) {
        if (b == byte) next = child;
      }
    }
    if (next == 0) {
      next = static_cast<uint32_t>(nodes.size());
      nodes.emplace_back();
      if (node == 0) {
        root_children[byte] = next;
      } else {
        nodes[node].children.emplace_back(byte, next);
      }
    }
    node = next;
  }
  if (!nodes[node].token) nodes[node].token = token;
  empty = false;
}

std::optional<std::pair<size_t, size_t>> AddedVocabulary::Matcher::longest_at(std::string_view text,
                                                                              size_t pos) const {
  std::optional<std::pair<size_t, size_t>> best;
  uint32_t node = root_children[static_cast<unsigned char>(text[pos])];
  for (size_t i = pos + 1; node != 0; ++i) {
    if (nodes[node].token) best.emplace(i - pos, *nodes[node].token);
    if (i == text.size()) break;
    const auto byte = static_cast<unsigned char>(text[i]);
    uint32_t next = 0;
    for (const auto& [b, child] : nodes[node].children) {
      if (b == byte) next = child;
    }
    node = next;
  }
  return best;
}

void AddedVocabulary::finish(const Normalizer& normalizer) {
  raw_ = Matcher{};
  normalized_ = Matcher{};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;
    std::string scratch;
    const std::string_view pattern =
        t.normalized ? normalizer.apply(t.content, scratch) : std::string_view(t.content);
    // A content that normalizes to nothing can never be matched.
    if (!pattern.empty()) (t.normalized ? normalized_ : raw_).insert(pattern, i);
  }
}

const AddedToken* AddedVocabulary::find_id(TokenId id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<TokenId> AddedVocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
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
    const auto hit = m.longest_at(text, pos);
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->first;
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
