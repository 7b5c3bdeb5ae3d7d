// The decoders of tokenizer.json beyond plain ByteLevel, run as tokenizers runs a decoder
// Sequence: each step rewrites the list of token strings in turn, then the list is concatenated.
// SentencePiece-style tokenizers (Llama 1/2, llama2.c) decode with Replace("▁" -> " "),
// ByteFallback ("<0xE2>" tokens -> bytes), Fuse and Strip (drop the space in front of the text),
// older exports with Metaspace.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace rqat::tokenizer {

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kFuse;
  std::string pattern;         // Replace: literal text replaced; Metaspace: the replacement char
  std::optional<Regex> regex;  // Replace with a regex pattern (instead of `pattern`)
  std::string content;         // Replace: the replacement; Strip: the stripped character
  size_t start = 0, stop = 0;  // Strip: at most this many `content` chars at the start / end
  bool prepend = true;         // Metaspace: prepend_scheme is not "never" (first token loses "▁")
};

class Decoder {
 public:
  // Decoding that would make the tokens grow past growth_limit.h's bound is an error.
  void add(DecoderStep step) { steps_.push_back(std::move(step)); }
  // Names the decoder in errors raised while decoding ("FILE: decoder").
  void set_where(std::string where) { where_ = std::move(where); }
  bool empty() const { return steps_.empty(); }
  const std::vector<DecoderStep>& steps() const { return steps_; }

  // The text of a whole sequence of token strings (special tokens already dropped if asked), as
  // tokenizers' Decoder::decode gives it.
  std::string decode(std::vector<std::string> tokens) const;

  // The bytes one token contributes to a streamed decode. `first`: no token was kept before it,
  // so start-of-text rules apply (Strip's leading characters after a Fuse, Metaspace's first
  // token). Byte tokens give their raw byte (the stream reassembles characters); Strip's trailing
  // characters after a Fuse are not removed, as the end of the text is not known yet.
  std::string token_bytes(const std::string& token, bool first) const;

 private:
  std::vector<std::string> run(std::vector<std::string> tokens, bool stream, bool first) const;

  std::vector<DecoderStep> steps_;
  std::string where_ = "tokenizer decoder";
};

}  // namespace rqat::tokenizer
