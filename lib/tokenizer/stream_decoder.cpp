// StreamDecoder (declared in tokenizer.h): holds back the bytes of a UTF-8 character until its last
// byte arrives. Cutting only where an incomplete sequence starts keeps the concatenated output
// equal to decode() of all ids, since U+FFFD repair never looks past such a point.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(TokenId id) {
  if (started_) {
    pending_ += tokenizer_.token_bytes(id, skip_special_);
  } else {
    pending_ += tokenizer_.first_token_bytes(id, skip_special_);
    // decode() drops unknown ids and skipped special tokens before its decoder sees the rest.
    started_ = !tokenizer_.id_to_token(id).empty() && !(skip_special_ && tokenizer_.is_special(id));
  }
  const size_t n = utf8::complete_prefix(pending_);
  std::string out = utf8::to_valid(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::to_valid(pending_);
  pending_.clear();
  return out;
}

}  // namespace rqat::tokenizer
