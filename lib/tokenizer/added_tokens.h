// Added (and special) tokens, matched in the text before anything else, as tokenizers'
// AddedVocabulary does: leftmost-longest matching, single_word/lstrip/rstrip rules, tokens with
// normalized=false matched in the raw text and the others in the normalized text.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"

namespace rqat::tokenizer {

class AddedVocabulary {
 public:
  // Later tokens with the content of an earlier one replace it.
  void add(const AddedToken& token);
  // Builds the matchers; normalized tokens are matched by their normalized form.
  void finish(const Normalizer& normalizer);

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(TokenId id) const;
  std::optional<TokenId> find_content(std::string_view content) const;

  struct Piece {
    std::string_view text;
    std::optional<TokenId> id;  // set when the piece is an added token
  };
  // Splits `text` into added tokens and the text between them. `normalized`: match the tokens with
  // normalized=true (in already normalized text), else the others (in raw text).
  void split(std::string_view text, bool normalized, std::vector<Piece>& out) const;

 private:
  struct Matcher {
    // Candidate tokens by first byte, longest pattern first (for leftmost-longest matching).
    std::array<std::vector<std::pair<std::string, size_t>>, 256> by_first_byte;
    bool empty = true;
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> by_id_;
  TokenMap by_content_;
  Matcher raw_, normalized_;
};

}  // namespace rqat::tokenizer
