// The concrete Tokenizer: added-token splitting, normalizer, pre-tokenizer and BPE model in the
// order Hugging Face `tokenizers` applies them, the post-processor's extra ids, byte-level
// decoding. Assembled by tokenizer_json.cpp or legacy_files.cpp; Tokenizer::load picks one
// (load.cpp).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace rqat::tokenizer {

// The single-sequence template of the post-processor: ids around the encoded text.
struct PostProcessor {
  std::vector<TokenId> prefix, suffix;
};

struct TokenizerParts {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  bool byte_level_decoder = true;  // false: no decoder, tokens are joined with spaces
  Decoder decoder;                 // when not empty, used instead of the two cases above
  PostProcessor post;
  TokenizerConfig config;
  std::string source;  // the file the parts came from, for errors found when assembling them
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(TokenizerParts parts);

  std::vector<TokenId> encode(std::string_view text,
                              bool add_special_tokens = false) const override;
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<TokenId> token_to_id(std::string_view token) const override;
  std::string id_to_token(TokenId id) const override;
  bool is_special(TokenId id) const override;
  const std::vector<AddedToken>& added_tokens() const override { return parts_.added.tokens(); }
  const TokenizerConfig& config() const override { return parts_.config; }
  std::string token_bytes(TokenId id, bool skip_special_tokens) const override;
  std::string first_token_bytes(TokenId id, bool skip_special_tokens) const override;

  const PostProcessor& post_processor() const { return parts_.post; }

 private:
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
  const std::string* token_string(TokenId id) const;

  TokenizerParts parts_;
  int64_t vocab_size_ = 0;
};

// Builders (tokenizer_json.cpp, legacy_files.cpp) and the final assembly shared by both (load.cpp).
TokenizerParts parts_from_tokenizer_json(const std::filesystem::path& path);
// The same on the text of a tokenizer.json held in memory; `file` names it in errors.
TokenizerParts parts_from_tokenizer_json_text(std::string_view text, const std::string& file);
TokenizerParts parts_from_legacy_files(const std::filesystem::path& dir,
                                       const TokenizerConfigFiles& config);
std::shared_ptr<const Tokenizer> assemble(TokenizerParts parts, const TokenizerConfigFiles& config);

}  // namespace rqat::tokenizer
