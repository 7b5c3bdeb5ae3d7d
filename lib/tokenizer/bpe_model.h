// The BPE model: vocabulary, merge ranks, and the merge loop that turns one pre-tokenized word into
// token ids, with a bounded, thread-safe cache of recent words.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace rqat::tokenizer {

// Hashing that lets unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// Ids may leave holes (added tokens often take ids that model.vocab lacks), but only this many
// beyond the number of entries: tables indexed by id (id_to_token_ here, the vocabulary size the
// model's embedding is checked against) then stay the size of the vocabulary, where one hostile
// id near 2^31 would ask for gigabytes.
inline constexpr int64_t kMaxIdHoles = int64_t{1} << 16;

class BpeModel {
 public:
  // `merges` in rank order; `where` names the file for errors (a merge whose parts or result are
  // not in the vocabulary is an error, as in tokenizers, and so are negative or duplicate ids and
  // ids of kMaxIdHoles or more beyond the number of entries).
  BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& where);

  // Appends the ids of one word (already in the byte-level alphabet when the tokenizer uses it).
  void tokenize(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  const std::string* id_to_token(TokenId id) const;  // nullptr when the id is not in the vocabulary
  int64_t max_id() const { return static_cast<int64_t>(id_to_token_.size()) - 1; }
  size_t size() const { return vocab_.size(); }  // entries of the vocabulary
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    TokenId new_id;
  };
  static uint64_t key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;
  void index_ids(const std::string& where);

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<TokenId> unk_id_;

  // Words seen recently, split across shards so threads rarely wait on each other; a full shard
  // is cleared rather than grown, which bounds memory on endless streams of new words.
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> words;
  };
  std::unique_ptr<std::array<Shard, kShards>> cache_;
};

}  // namespace rqat::tokenizer
