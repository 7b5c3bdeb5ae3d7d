// tokenizer.json (+ tokenizer_config.json) loading, then encode and decode of arbitrary bytes.
// Input: "tokenizer.json\0tokenizer_config.json\0text to encode".
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  // Plain variables, not structured bindings: clang 14 cannot capture those in the lambda.
  const auto files = fuzz::split_at_nul(fuzz::as_text(data, size));
  const auto config_and_text = fuzz::split_at_nul(files.second);
  const std::string_view tokenizer_json = files.first, config_json = config_and_text.first,
                         text = config_and_text.second;
  fuzz::expect_clean_failure([&] {
    const auto tokenizer =
        tokenizer::Tokenizer::from_json_text(tokenizer_json, config_json, fuzz::scratch_dir());
    const auto ids = tokenizer->encode(text);
    const int64_t vocab = tokenizer->vocab_size();
    for (const auto id : ids) fuzz::require(id >= 0 && id < vocab, "encoded ids inside the vocabulary");
    (void)tokenizer->decode(ids);
    (void)tokenizer->decode(ids, /*skip_special_tokens=*/true);
    tokenizer::StreamDecoder stream(*tokenizer, /*skip_special_tokens=*/false);
    for (const auto id : ids) (void)stream.push(id);
    (void)stream.flush();
    // Ids from a model's sampler are in range, but the tokenizer refuses others cleanly.
    const tokenizer::TokenId outside[] = {static_cast<tokenizer::TokenId>(vocab), -1};
    fuzz::expect_clean_failure([&] { (void)tokenizer->decode(outside); });
  });
  return 0;
}
