// See bpe_trainer.h.
#include "tokenizer/bpe_trainer.h"

#include <deque>
#include <set>
#include <string_view>
#include <utility>

#include "io/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {
namespace {

using Symbols = std::vector<std::string>;

// A word's characters (UTF-8 code points): the symbols BPE starts from.
Symbols split_characters(const std::string& word) {
  Symbols out;
  for (size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    size_t n = utf8::decode(word, i, cp);
    if (n == 0) n = 1;  // not UTF-8: byte-level words always are, keep going byte by byte
    out.emplace_back(word.substr(i, n));
    i += n;
  }
  return out;
}

void merge_pair(Symbols& symbols, const std::string& left, const std::string& right) {
  Symbols merged;
  merged.reserve(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      merged.push_back(left + right);
      ++i;
    } else {
      merged.push_back(symbols[i]);
    }
  }
  symbols = std::move(merged);
}

// The pre-tokenizer of byte_level_tokenizer_json(); kept beside it so training and encoding cut
// text into the same words.
PreTokenizer qwen2_byte_level_pre_tokenizer() {
  PreTokenizer p;
  p.add_split(SplitStep{Regex(kQwen2Pattern, false, "Qwen2 split pattern"),
                        SplitBehavior::kIsolated, false});
  p.add_byte_level({/*add_prefix_space=*/false, /*use_regex=*/false});
  return p;
}

nlohmann::ordered_json byte_level_step(const char* type) {
  return {
      {"type", type}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

}  // namespace

std::vector<BpeMerge> train_bpe_merges(const std::map<std::string, int64_t>& word_counts,
                                       const BpeTrainerOptions& options) {
  if (options.max_merges < 0) fail("BPE trainer: max_merges {} is negative", options.max_merges);
  if (options.min_pair_count < 1)
    fail("BPE trainer: min_pair_count {} must be at least 1", options.min_pair_count);
  std::vector<std::pair<Symbols, int64_t>> words;
  for (const auto& [word, count] : word_counts) {
    if (count < 0) fail("BPE trainer: word '{}' has a negative count {}", word, count);
    if (count > 0) words.emplace_back(split_characters(word), count);
  }
  std::vector<BpeMerge> merges;
  while (static_cast<int64_t>(merges.size()) < options.max_merges) {
    // std::map orders pairs by (left, right) byte order: the first of the highest count wins.
    std::map<std::pair<std::string, std::string>, int64_t> pair_counts;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i)
        pair_counts[{symbols[i], symbols[i + 1]}] += count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [pair, count] : pair_counts) {
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr || best_count < options.min_pair_count) break;
    merges.push_back({best->first, best->second, best_count});
    for (auto& [symbols, count] : words) merge_pair(symbols, best->first, best->second);
  }
  return merges;
}

std::map<std::string, int64_t> count_byte_level_words(const std::vector<std::string>& texts) {
  const PreTokenizer pre = qwen2_byte_level_pre_tokenizer();
  const Normalizer nfc({Normalizer::Form::kNFC});
  std::map<std::string, int64_t> counts;
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  std::string scratch;
  for (const std::string& text : texts) {
    if (!utf8::is_valid(text)) fail("BPE trainer: a training text is not valid UTF-8");
    words.clear();
    storage.clear();
    pre.run(nfc.apply(text, scratch), words, storage);
    for (std::string_view w : words) ++counts[std::string(w)];
  }
  return counts;
}

nlohmann::ordered_json byte_level_tokenizer_json(const std::vector<BpeMerge>& merges,
                                                 const std::vector<std::string>& special_tokens) {
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  std::set<std::string> seen;
  int64_t next_id = 0;
  auto add = [&](const std::string& token) {
    if (!seen.insert(token).second) return false;  // two merges may spell the same token
    vocab[token] = next_id++;
    return true;
  };
  for (int b = 0; b < 256; ++b)
    add(std::string(byte_level::mapped_char(static_cast<unsigned char>(b))));
  Json added = Json::array();
  for (const std::string& special : special_tokens) {
    const int64_t id = next_id;
    // In the model vocabulary as well: tokenizers keeps an added token's id only when the model
    // knows the token, otherwise it renumbers it after the vocabulary.
    if (!add(special)) fail("BPE tokenizer: special token '{}' given twice", special);
    added.push_back({{"id", id},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  Json merge_list = Json::array();
  for (const BpeMerge& m : merges) {
    if (m.left.find(' ') != std::string::npos || m.right.find(' ') != std::string::npos)
      fail("BPE tokenizer: merge '{}' + '{}' has a space (not a byte-level symbol)", m.left,
           m.right);
    add(m.left + m.right);
    merge_list.push_back(m.left + " " + m.right);
  }
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", std::string(kQwen2Pattern)}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers", Json::array({split, byte_level_step("ByteLevel")})}}},
              {"post_processor", byte_level_step("ByteLevel")},
              {"decoder", byte_level_step("ByteLevel")},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

}  // namespace rqat::tokenizer
