// See llama2c_vocab.h. The tokenizer.json layout is the one tokenizers 0.2x serializes (checked by
// tests/python/test_llama2c_convert.py, which loads it with tokenizers and transformers).
#include "tokenizer/llama2c_vocab.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "io/error.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr int32_t kMaxPieceBytes = 1 << 20;          // far above any real piece: guards garbage
// The merge search looks up every split of every piece: work quadratic in a piece's length. Real
// vocabularies (32000 pieces of a few bytes) need about 10^7 byte lookups; a hostile file of long
// pieces is refused before it could hang the conversion.
constexpr uint64_t kMaxMergeSearchBytes = uint64_t{1} << 32;

bool is_byte_token(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece.back() != '>') return false;
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return hex(piece[3]) && hex(piece[4]);
}

// Special tokens of llama2.c: ids 1 and 2 are stored as "\n<s>\n" and "\n</s>\n".
std::string hf_piece(const std::string& stored, size_t id, const std::string& where) {
  if (id == 1 || id == 2) {
    std::string_view s = stored;
    if (s.size() > 2 && s.front() == '\n' && s.back() == '\n') s = s.substr(1, s.size() - 2);
    return std::string(s);
  }
  if (!utf8::is_valid(stored))
    fail("{}: token {} is not valid UTF-8 (not a llama2.c tokenizer.bin?)", where, id);
  std::string out;
  for (const char c : stored) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out += c;
    }
  }
  return out;
}

// Appends to a JSON object without the ordered map's linear duplicate search (the keys are known
// to be unique), which would make a 32000-token vocabulary quadratic.
void append_unique(OJson& object, const std::string& key, OJson value) {
  auto& map = object.get_ref<OJson::object_t&>();
  static_cast<OJson::object_t::Container&>(map).emplace_back(key, std::move(value));
}

OJson added_token(const std::string& content, int64_t id) {
  return OJson{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Every split of a piece hashes both halves: about length^2 bytes per piece.
void check_merge_search_work(const std::vector<std::string>& pieces,
                             const std::vector<bool>& mergeable, const std::string& where) {
  uint64_t work = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!mergeable[i]) continue;
    const uint64_t length = pieces[i].size();  // at most 3 x kMaxPieceBytes: no overflow below
    work += length * length;
    if (work > kMaxMergeSearchBytes) {
      fail(
          "{}: the pieces up to token {} are too long in total to derive merges from ({} bytes "
          "of lookups, limit {})",
          where, i, work, kMaxMergeSearchBytes);
    }
  }
}

}  // namespace

Llama2cVocab read_llama2c_vocab(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the llama2.c tokenizer file", where);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto read_i32 = [&](const char* what, size_t token) {
    if (bytes.size() - pos < 4)
      fail("{}: truncated at byte {} (token {}: {} missing)", where, pos, token, what);
    int32_t v = 0;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  };
  Llama2cVocab vocab;
  vocab.max_token_length = read_i32("max_token_length", 0);
  if (vocab.max_token_length <= 0 || vocab.max_token_length > kMaxPieceBytes) {
    fail("{}: max_token_length is {}, not a llama2.c tokenizer file", where,
         vocab.max_token_length);
  }
  while (pos < bytes.size()) {
    const size_t id = vocab.pieces.size();
    const int32_t score_bits = read_i32("score", id);
    float score = 0;
    std::memcpy(&score, &score_bits, 4);
    const int32_t length = read_i32("length", id);
    // llama2.c writes max_token_length as the longest piece, so longer ones mean a damaged file.
    if (length <= 0 || length > vocab.max_token_length) {
      fail("{}: token {} has length {} (max_token_length {}), not a llama2.c tokenizer file", where,
           id, length, vocab.max_token_length);
    }
    if (bytes.size() - pos < static_cast<size_t>(length)) {
      fail("{}: truncated at byte {} (token {} needs {} bytes, {} left)", where, pos, id, length,
           bytes.size() - pos);
    }
    vocab.pieces.emplace_back(bytes, pos, static_cast<size_t>(length));
    vocab.scores.push_back(score);
    pos += static_cast<size_t>(length);
  }
  if (vocab.pieces.size() < 3)
    fail("{}: {} tokens; a llama2.c vocabulary has at least <unk>, <s>, </s>", where,
         vocab.pieces.size());
  return vocab;
}

HfTokenizerFiles llama2c_vocab_to_hf(const Llama2cVocab& vocab, int64_t model_max_length,
                                     const std::string& where) {
  const size_t n = vocab.pieces.size();
  if (n < 3 || vocab.scores.size() != n)
    fail("{}: a llama2.c vocabulary needs <unk>, <s>, </s> and one score per token", where);
  std::vector<std::string> pieces(n);
  std::unordered_map<std::string, size_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    pieces[i] = hf_piece(vocab.pieces[i], i, where);
    if (!ids.emplace(pieces[i], i).second)
      fail("{}: tokens {} and {} are both '{}'", where, ids[pieces[i]], i, pieces[i]);
  }
  // Pieces that BPE merges build or consume: not <unk>/<s>/</s> and not byte tokens, which
  // SentencePiece (and llama2.c's encoder, which looks concatenations up in the vocabulary) never
  // produce by merging.
  std::vector<bool> mergeable(n, false);
  for (size_t i = 3; i < n; ++i) mergeable[i] = !is_byte_token(pieces[i]);
  check_merge_search_work(pieces, mergeable, where);

  struct Merge {
    size_t left, right, merged;
  };
  std::vector<Merge> merges;
  for (size_t m = 3; m < n; ++m) {
    if (!mergeable[m]) continue;
    const std::string& p = pieces[m];
    char32_t cp = 0;
    for (size_t cut = utf8::decode(p, 0, cp); cut > 0 && cut < p.size();) {
      const auto l = ids.find(p.substr(0, cut));
      const auto r = ids.find(p.substr(cut));
      if (l != ids.end() && r != ids.end() && mergeable[l->second] && mergeable[r->second])
        merges.push_back({l->second, r->second, m});
      const size_t step = utf8::decode(p, cut, cp);
      if (step == 0) break;
      cut += step;
    }
  }
  // Lowest rank merges first in tokenizers' BPE; llama2.c merges the pair whose concatenation has
  // the highest score, so rank by descending score (ties: lower id first).
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) {
    const float sa = vocab.scores[a.merged], sb = vocab.scores[b.merged];
    if (sa != sb) return sa > sb;
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left < b.left;
  });

  const std::string& unk = pieces[0];
  const std::string& bos = pieces[1];
  const std::string& eos = pieces[2];
  OJson vocab_json = OJson::object();
  for (size_t i = 0; i < n; ++i) append_unique(vocab_json, pieces[i], static_cast<int64_t>(i));
  OJson merges_json = OJson::array();
  for (const Merge& m : merges)
    merges_json.push_back(OJson::array({pieces[m.left], pieces[m.right]}));

  const std::string space(kSpace);
  OJson single = OJson::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  OJson pair = single;
  pair.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 1}}}});
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});

  HfTokenizerFiles out;
  OJson& t = out.tokenizer;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = OJson::array({added_token(unk, 0), added_token(bos, 1), added_token(eos, 2)});
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", space}, {"prepend_scheme", "first"}, {"split", false}};
  t["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", single},
      {"pair", pair},
      {"special_tokens",
       {{bos, {{"id", bos}, {"ids", OJson::array({1})}, {"tokens", OJson::array({bos})}}}}}};
  t["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       OJson::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}},
                     {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", std::move(vocab_json)},
                {"merges", std::move(merges_json)}};

  OJson decoder_entries = OJson::object();
  for (size_t i = 0; i < 3; ++i) {
    OJson entry = added_token(pieces[i], static_cast<int64_t>(i));
    entry.erase("id");
    decoder_entries[std::to_string(i)] = std::move(entry);
  }
  // legacy false: Metaspace "first" rather than the legacy "▁" after every special token.
  out.config = {{"add_bos_token", true},
                {"add_eos_token", false},
                {"added_tokens_decoder", std::move(decoder_entries)},
                {"bos_token", bos},
                {"clean_up_tokenization_spaces", false},
                {"eos_token", eos},
                {"legacy", false},
                {"model_max_length", model_max_length},
                {"tokenizer_class", "LlamaTokenizer"},
                {"unk_token", unk}};
  return out;
}

}  // namespace rqat::tokenizer
