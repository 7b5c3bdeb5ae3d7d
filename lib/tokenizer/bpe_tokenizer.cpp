// See bpe_tokenizer.h. Encoding order, as in tokenizers' Tokenizer::encode: split out added tokens
// with normalized=false in the raw text; normalize each remaining piece; split out normalized added
// tokens; pre-tokenize; BPE each word; then the post-processor's ids.
#include "tokenizer/bpe_tokenizer.h"

#include <deque>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {

BpeTokenizer::BpeTokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  vocab_size_ = parts_.model->max_id() + 1;
  for (const AddedToken& t : parts_.added.tokens())
    vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<TokenId>& out) const {
  std::vector<AddedVocabulary::Piece> raw_pieces, pieces;
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  std::string normalized_scratch;
  parts_.added.split(text, false, raw_pieces);
  for (const auto& raw : raw_pieces) {
    if (raw.id) {
      out.push_back(*raw.id);
      continue;
    }
    const bool raw_at_start = raw.text.data() == text.data();
    const std::string_view normalized = parts_.normalizer.apply(raw.text, normalized_scratch);
    pieces.clear();
    parts_.added.split(normalized, true, pieces);
    for (const auto& piece : pieces) {
      if (piece.id) {
        out.push_back(*piece.id);
        continue;
      }
      storage.clear();
      if (parts_.pre_tokenizer.empty()) {
        words.assign(1, piece.text);
      } else {
        // Whether the piece starts at offset 0 of the input (Metaspace's "first" scheme).
        const bool at_start = raw_at_start && piece.text.data() == normalized.data();
        parts_.pre_tokenizer.run(piece.text, words, storage, at_start);
      }
      for (const std::string_view w : words) parts_.model->tokenize(w, out);
    }
  }
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens)
    out.insert(out.end(), parts_.post.prefix.begin(), parts_.post.prefix.end());
  // Text from C++ may hold invalid UTF-8 (Python strings never do): repair it first.
  if (utf8::is_valid(text)) {
    encode_plain(text, out);
  } else {
    encode_plain(utf8::to_valid(text), out);
  }
  if (add_special_tokens)
    out.insert(out.end(), parts_.post.suffix.begin(), parts_.post.suffix.end());
  return out;
}

const std::string* BpeTokenizer::token_string(TokenId id) const {
  if (const AddedToken* t = parts_.added.find_id(id)) return &t->content;
  return parts_.model->id_to_token(id);
}

std::string BpeTokenizer::token_bytes(TokenId id, bool skip_special_tokens) const {
  const std::string* token = token_string(id);
  if (token == nullptr) return {};
  if (skip_special_tokens && is_special(id)) return {};
  if (!parts_.decoder.empty()) return parts_.decoder.token_bytes(*token, false);
  if (!parts_.byte_level_decoder) return *token;
  std::string out;
  byte_level::append_token_bytes(*token, out);
  return out;
}

std::string BpeTokenizer::first_token_bytes(TokenId id, bool skip_special_tokens) const {
  const std::string* token = token_string(id);
  if (token == nullptr || (skip_special_tokens && is_special(id))) return {};
  if (!parts_.decoder.empty()) return parts_.decoder.token_bytes(*token, true);
  return token_bytes(id, skip_special_tokens);
}

std::string BpeTokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  if (!parts_.decoder.empty()) {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const TokenId id : ids) {
      const std::string* token = token_string(id);
      // Unknown ids are dropped, as tokenizers does.
      if (token == nullptr || (skip_special_tokens && is_special(id))) continue;
      tokens.push_back(*token);
    }
    return utf8::to_valid(parts_.decoder.decode(std::move(tokens)));
  }
  std::string bytes;
  bool first = true;
  for (const TokenId id : ids) {
    const std::string* token = token_string(id);
    // Unknown ids are dropped, as tokenizers does.
    if (token == nullptr || (skip_special_tokens && is_special(id))) continue;
    if (parts_.byte_level_decoder) {
      byte_level::append_token_bytes(*token, bytes);
    } else {
      if (!first) bytes += ' ';
      bytes += *token;
    }
    first = false;
  }
  return utf8::to_valid(bytes);
}

std::optional<TokenId> BpeTokenizer::token_to_id(std::string_view token) const {
  if (auto id = parts_.added.find_content(token)) return id;
  return parts_.model->token_to_id(token);
}

std::string BpeTokenizer::id_to_token(TokenId id) const {
  const std::string* token = token_string(id);
  return token == nullptr ? std::string() : *token;
}

bool BpeTokenizer::is_special(TokenId id) const {
  const AddedToken* t = parts_.added.find_id(id);
  return t != nullptr && t->special;
}

}  // namespace rqat::tokenizer
