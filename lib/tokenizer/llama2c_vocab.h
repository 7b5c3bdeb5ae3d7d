// llama2.c's tokenizer.bin (its export of a SentencePiece BPE model) and its translation into the
// Hugging Face files of a Llama tokenizer, so a converted llama2.c model is a normal model
// directory for rqat and for transformers.
//
// tokenizer.bin: int32 max_token_length, then per token: float32 score, int32 length, the piece's
// bytes. Ids 0, 1, 2 are <unk>, BOS ("\n<s>\n") and EOS ("\n</s>\n"); ids 3..258 the byte tokens
// "<0x00>".."<0xFF>"; SentencePiece's "▁" is stored as a space. The file does not say how many
// tokens it holds: all of it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rqat::tokenizer {

struct Llama2cVocab {
  int32_t max_token_length = 0;
  std::vector<std::string> pieces;  // bytes as stored
  std::vector<float> scores;        // SentencePiece scores: higher merges first
};

// Errors name the file and the token index (truncated record, negative length, ...).
Llama2cVocab read_llama2c_vocab(const std::filesystem::path& path);

struct HfTokenizerFiles {
  nlohmann::ordered_json tokenizer;  // tokenizer.json
  nlohmann::ordered_json config;     // tokenizer_config.json
};

// The Llama tokenizer transformers builds from a SentencePiece BPE model: a BPE model with
// byte_fallback whose merges are every split of a piece into two pieces, ranked by the merged
// piece's score (so that lowest rank first = llama2.c's highest score first); a Metaspace
// pre-tokenizer that turns spaces into "▁" and puts one in front of the input (prepend_scheme
// "first", what transformers' LlamaTokenizer sets); the Replace/ByteFallback/Fuse/Strip decoder;
// <s> added in front by the post-processor; <unk>, <s>, </s> as special added tokens.
// `where` names the tokenizer.bin in errors (invalid UTF-8 piece, duplicate piece).
HfTokenizerFiles llama2c_vocab_to_hf(const Llama2cVocab& vocab, int64_t model_max_length,
                                     const std::string& where);

}  // namespace rqat::tokenizer
