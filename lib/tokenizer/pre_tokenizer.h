// Pre-tokenization as in Hugging Face `tokenizers`: a chain of Split (regex, with its delimiter
// behavior), ByteLevel (optional prefix space, optional GPT-2 regex, byte-to-symbol mapping) and
// Metaspace (SentencePiece: spaces become "▁", a "▁" in front, optional split before each "▁")
// steps that cut normalized text into the words BPE merges within.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace rqat::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct ByteLevelStep {
  bool add_prefix_space = false;
  bool use_regex = true;
};

// Where Metaspace puts a replacement character in front of a word that does not start with one:
// always, never, or only in front of the first word of the input (offset 0 of the original text:
// not after an added token), which is what Llama tokenizers without the "legacy" flag do.
enum class PrependScheme { kAlways, kNever, kFirst };

struct MetaspaceStep {
  std::string replacement = "\xE2\x96\x81";  // U+2581 "▁"
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;  // cut the word in front of every replacement character
};

// The GPT-2 pattern ByteLevel uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2's pattern (its tokenizer class hard-codes it for vocab.json + merges.txt).
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  struct Step {
    enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
    std::vector<SplitStep> split;  // one element when kind == kSplit (Regex has no default ctor)
    ByteLevelStep byte_level;
    MetaspaceStep metaspace;
  };

  void add_split(SplitStep step);
  void add_byte_level(ByteLevelStep step);
  void add_metaspace(MetaspaceStep step);
  bool empty() const { return steps_.empty(); }
  size_t size() const { return steps_.size(); }
  bool maps_bytes() const;  // whether some step maps bytes to the byte-level alphabet

  // Cuts `text` into words (views into `text` or into `storage`, valid while both live).
  // `at_input_start`: `text` begins at offset 0 of the string given to encode (Metaspace's "first"
  // scheme prepends only there).
  void run(std::string_view text, std::vector<std::string_view>& words,
           std::deque<std::string>& storage, bool at_input_start = true) const;

 private:
  std::vector<Step> steps_;
};

// The pieces of `text` that a regex split with `behavior` keeps (empty pieces dropped).
void split_by_regex(std::string_view text, const Regex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string_view>& out);

}  // namespace rqat::tokenizer
