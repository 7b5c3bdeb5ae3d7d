// A small, plain byte-level BPE trainer and a writer of the tokenizer.json it defines, in the
// form Qwen2/Qwen3 checkpoints ship (Qwen2 split regex: digits stay single tokens; ByteLevel
// mapping; ByteLevel decoder), so Hugging Face `tokenizers` and rqat's tokenizer both load it.
// Used for the synthetic task of experiments/tiny, where the corpus is small and a readable
// O(merges x corpus) loop is fast enough.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rqat::tokenizer {

struct BpeMerge {
  std::string left, right;  // byte-level symbols; the merged token is left + right
  int64_t count = 0;        // occurrences of the pair in the corpus when it was chosen
};

struct BpeTrainerOptions {
  int64_t max_merges = 256;
  int64_t min_pair_count = 2;  // a pair seen fewer times is not worth a token
};

// Learns merges from words (strings in the byte-level alphabet) and their counts. Each round
// counts adjacent symbol pairs over all words (a word of count c adds c per occurrence), takes
// the most frequent pair and, among equally frequent pairs, the smallest (left, right) in byte
// order, so the result does not depend on hashing or platform; then merges that pair in every
// word, left to right without overlap. Stops after max_merges or when no pair reaches
// min_pair_count.
std::vector<BpeMerge> train_bpe_merges(const std::map<std::string, int64_t>& word_counts,
                                       const BpeTrainerOptions& options);

// The words the tokenizer written by byte_level_tokenizer_json() cuts `texts` into before BPE
// (Qwen2 split regex, then the byte-level mapping), with their counts.
std::map<std::string, int64_t> count_byte_level_words(const std::vector<std::string>& texts);

// tokenizer.json: ids 0..255 are the byte symbols in byte order, then `special_tokens` (also
// registered as special added tokens, so their ids never depend on the merges), then each new
// token the merges create, in merge order.
nlohmann::ordered_json byte_level_tokenizer_json(const std::vector<BpeMerge>& merges,
                                                 const std::vector<std::string>& special_tokens);

}  // namespace rqat::tokenizer
