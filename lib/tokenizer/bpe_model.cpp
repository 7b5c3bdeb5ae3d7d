// See bpe_model.h. The merge loop is tokenizers' (models/bpe/word.rs): a min-heap of candidate
// pairs ordered by (rank, position) over a doubly linked list of symbols, so a word of n symbols
// costs O(n log n); stale heap entries are recognised and skipped.
#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <queue>

#include "io/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {

BpeModel::BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)),
      options_(std::move(options)),
      cache_(std::make_unique<std::array<Shard, kShards>>()) {
  index_ids(where);
  // Ranks are int32 in the merge loop's heap.
  if (merges.size() > static_cast<size_t>(INT32_MAX))
    fail("{}: model.merges: {} merges, more than 2^31 - 1", where, merges.size());
  merges_.reserve(merges.size() * 2);
  const std::string_view prefix = options_.continuing_subword_prefix;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end() || ib == vocab_.end()) {
      fail("{}: model.merges[{}]: {} {} uses a token missing from the vocabulary", where, rank,
           json_fields::excerpt(a), json_fields::excerpt(b));
    }
    // The merged token drops the continuing-subword prefix of its second part, as tokenizers does.
    std::string merged = a;
    merged += (!prefix.empty() && b.starts_with(prefix)) ? b.substr(prefix.size()) : b;
    const auto im = vocab_.find(merged);
    if (im == vocab_.end()) {
      fail("{}: model.merges[{}]: the merged token {} is missing from the vocabulary", where, rank,
           json_fields::excerpt(merged));
    }
    merges_[key(ia->second, ib->second)] = Merge{static_cast<int32_t>(rank), im->second};
  }
  if (options_.unk_token) {
    const auto it = vocab_.find(*options_.unk_token);
    if (it == vocab_.end())
      fail("{}: model.unk_token {} is not in the vocabulary", where,
           json_fields::excerpt(*options_.unk_token));
    unk_id_ = it->second;
  }
}

// The id -> token table, sized by the largest id once every id is known to be near the number of
// entries (kMaxIdHoles), so a hostile id cannot make it huge.
void BpeModel::index_ids(const std::string& where) {
  const int64_t bound = static_cast<int64_t>(vocab_.size()) + kMaxIdHoles;
  TokenId max_id = -1;
  for (const auto& [token, id] : vocab_) {
    if (id < 0)
      fail("{}: model.vocab: token {} has the negative id {}", where, json_fields::excerpt(token),
           id);
    if (id >= bound) {
      fail(
          "{}: model.vocab: token {} has id {}, far beyond the {} entries (ids must stay below {})",
          where, json_fields::excerpt(token), id, vocab_.size(), bound);
    }
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    if (has_id_[id]) {
      fail("{}: model.vocab: tokens {} and {} both have id {}", where,
           json_fields::excerpt(id_to_token_[id]), json_fields::excerpt(token), id);
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  Shard* shard = nullptr;
  if (cacheable) {
    shard = &(*cache_)[StringHash{}(word) % kShards];
    std::lock_guard lock(shard->mutex);
    if (const auto it = shard->words.find(word); it != shard->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::vector<TokenId> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::lock_guard lock(shard->mutex);
    if (shard->words.size() >= kShardCapacity) shard->words.clear();
    shard->words.emplace(std::string(word), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](TokenId id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };

  // Initial symbols: one per character (with the subword prefix / word suffix when configured),
  // else byte-fallback tokens, else the unknown token (fused when asked), else dropped.
  TokenId pending_unk = -1;  // an unknown-token symbol not yet added (fuse_unk may extend it)
  std::string piece;
  size_t i = 0;
  while (i < word.size()) {
    char32_t cp = 0;
    size_t n = utf8::decode(word, i, cp);
    if (n == 0) n = 1;
    const bool is_first = i == 0, is_last = i + n == word.size();
    std::string_view s = word.substr(i, n);
    if ((!is_first && !options_.continuing_subword_prefix.empty()) ||
        (is_last && !options_.end_of_word_suffix.empty())) {
      piece.clear();
      if (!is_first) piece += options_.continuing_subword_prefix;
      piece += s;
      if (is_last) piece += options_.end_of_word_suffix;
      s = piece;
    }
    if (const auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(it->second);
    } else {
      bool done = false;
      if (options_.byte_fallback) {
        std::vector<TokenId> bytes;
        for (const char c : s) {
          const auto it2 = vocab_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(c)));
          if (it2 == vocab_.end()) break;
          bytes.push_back(it2->second);
        }
        if (bytes.size() == s.size()) {
          for (const TokenId b : bytes) add(b);
          done = true;
        }
      }
      if (!done && unk_id_) {
        if (pending_unk >= 0 && !options_.fuse_unk) add(pending_unk);
        pending_unk = *unk_id_;
      }
    }
    i += n;
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    TokenId new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(symbols.size()); ++p) consider(p);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges_.find(key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t p = 0; p >= 0; p = symbols[p].next) out.push_back(symbols[p].id);
}

}  // namespace rqat::tokenizer
