// Byte-level BPE tokenizers of the Qwen, Llama-3 and GPT-2 families, loaded from a Hugging Face
// tokenizer directory: tokenizer.json, or the older vocab.json + merges.txt (+
// tokenizer_config.json). Encoding follows Hugging Face `tokenizers`: added/special tokens are
// split out first, the rest is normalized (NFC where configured), pre-tokenized with the split
// regex (PCRE2), mapped to byte-level symbols and merged by rank.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/artifact.h"

namespace rqat::tokenizer {

using TokenId = int32_t;

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// What tokenizer_config.json (and special_tokens_map.json) add: special token strings, the chat
// template text and whether encode() adds a BOS token.
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::string chat_template;  // raw Jinja text, empty when absent
};

class Tokenizer {
 public:
  // Loads tokenizer.json when present, else vocab.json + merges.txt; tokenizer_config.json is read
  // when present. Errors name the file and field.
  static std::shared_ptr<const Tokenizer> load(const io::Artifact& artifact);
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& dir);  // opens it
  // The same from texts in memory, through the parsers load uses (fuzzers call it): tokenizer.json,
  // and tokenizer_config.json or "" when there is none. Errors name the texts as
  // `where`/tokenizer.json and `where`/tokenizer_config.json.
  static std::shared_ptr<const Tokenizer> from_json_text(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json,
                                                         const std::filesystem::path& where);
  virtual ~Tokenizer() = default;

  virtual std::vector<TokenId> encode(std::string_view text,
                                      bool add_special_tokens = false) const = 0;
  virtual std::string decode(std::span<const TokenId> ids,
                             bool skip_special_tokens = false) const = 0;

  virtual int64_t vocab_size() const = 0;  // including added tokens (max id + 1)
  virtual std::optional<TokenId> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(TokenId id) const = 0;  // the raw vocabulary string
  virtual bool is_special(TokenId id) const = 0;
  virtual const std::vector<AddedToken>& added_tokens() const = 0;
  virtual const TokenizerConfig& config() const = 0;

  // The bytes one token stands for (byte-level decoding), and "" for special tokens when skipped.
  virtual std::string token_bytes(TokenId id, bool skip_special_tokens) const = 0;

  // token_bytes() of the first token that decode() keeps. Differs only where the decoder treats
  // the start of the text specially: SentencePiece decoders drop the space in front of the first
  // word ("▁Once" decodes to "Once" at the start, " Once" after other text).
  virtual std::string first_token_bytes(TokenId id, bool skip_special_tokens) const {
    return token_bytes(id, skip_special_tokens);
  }
};

// Incremental decoding for streaming output: push ids one by one, get back only complete UTF-8
// characters, never half of one.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string push(TokenId id);  // newly completed text (possibly empty)
  std::string flush();           // whatever is left, invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool started_ = false;  // a token was kept: later ones are no longer at the start of the text
  std::string pending_;
};

}  // namespace rqat::tokenizer
