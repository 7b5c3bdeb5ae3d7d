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
  // A byte trie of the patterns. Walking it from one position finds the longest pattern there in
  // at most (longest pattern) steps, however many patterns share a prefix: trying each candidate
  // in turn cost their total length per position, so 10^4 tokens with a common 100-byte prefix
  // made a megabyte of text take 10^12 comparisons.
  struct Matcher {
    struct Node {
      std::vector<std::pair<unsigned char, uint32_t>> children;  // (byte, node), few per node
      std::optional<size_t> token;  // index in tokens_ of the pattern that ends here
    };
    std::vector<Node> nodes = std::vector<Node>(1);  // nodes[0] is the root
    std::array<uint32_t, 256> root_children{};       // the root's children by byte (0: none)
    bool empty = true;

    // The first token inserted with a pattern keeps it (as the stable longest-first order did).
    void insert(std::string_view pattern, size_t token);
    // The longest pattern starting at text[pos]: its length and token index.
    std::optional<std::pair<size_t, size_t>> longest_at(std::string_view text, size_t pos) const;
  };
  // Both map to indices in tokens_. Content is unique; an id may be given twice (a hostile file
  // or a config that disagrees with tokenizer.json): the later token then owns it, and replacing
  // a token by content never disturbs another token's id.
  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> by_id_;
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> by_content_;
  Matcher raw_, normalized_;
};

}  // namespace rqat::tokenizer
