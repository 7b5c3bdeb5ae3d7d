// See pre_tokenizer.h. The delimiter behaviors follow tokenizers' NormalizedString::split: the text
// is cut into alternating match / non-match ranges, which are then kept, dropped or merged.
#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/byte_level.h"

namespace rqat::tokenizer {
namespace {

struct Range {
  size_t begin, end;
  bool is_match;
};

Regex& gpt2_regex() {
  static Regex regex(kGpt2Pattern, false, "ByteLevel pre-tokenizer");
  return regex;
}

// Metaspace on one word: spaces (U+0020 only) become the replacement, which is prepended as the
// scheme says, then the word is cut in front of every replacement (tokenizers' MergedWithNext).
void run_metaspace(const MetaspaceStep& m, std::string_view word, bool first_word,
                   std::vector<std::string_view>& out, std::deque<std::string>& storage) {
  std::string& mapped = storage.emplace_back();
  mapped.reserve(word.size() + 2 * m.replacement.size());
  for (const char c : word) {
    if (c == ' ') {
      mapped += m.replacement;
    } else {
      mapped += c;
    }
  }
  const bool prepend = m.prepend_scheme == PrependScheme::kAlways ||
                       (m.prepend_scheme == PrependScheme::kFirst && first_word);
  if (prepend && !std::string_view(mapped).starts_with(m.replacement))
    mapped.insert(0, m.replacement);
  if (!m.split) {
    out.push_back(mapped);
    return;
  }
  const std::string_view text = mapped;
  size_t begin = 0;
  for (size_t at = text.find(m.replacement, 1); at != std::string_view::npos;
       at = text.find(m.replacement, at + m.replacement.size())) {
    if (at > begin) out.push_back(text.substr(begin, at - begin));
    begin = at;
  }
  if (begin < text.size()) out.push_back(text.substr(begin));
}

}  // namespace

void split_by_regex(std::string_view text, const Regex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string_view>& out) {
  if (text.empty()) return;
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Range> ranges;
  matches.clear();
  ranges.clear();
  regex.find_all(text, matches);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) ranges.push_back({prev, b, invert});
    ranges.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) ranges.push_back({prev, text.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(text.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Range& r : ranges) emit(r.begin, r.end);
      return;
    case SplitBehavior::kRemoved:
      for (const Range& r : ranges) {
        if (!r.is_match) emit(r.begin, r.end);
      }
      return;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      // Contiguous: runs of the same kind join; MergedWithPrevious: a match joins what precedes it.
      std::vector<std::pair<size_t, size_t>> merged;
      bool previous_match = false;
      for (const Range& r : ranges) {
        const bool join = behavior == SplitBehavior::kContiguous ? r.is_match == previous_match
                                                                 : (r.is_match && !previous_match);
        if (join && !merged.empty()) {
          merged.back().second = r.end;
        } else {
          merged.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      for (const auto& [b, e] : merged) emit(b, e);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      std::vector<std::pair<size_t, size_t>> merged;  // built back to front
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().first = it->begin;
        } else {
          merged.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      for (auto it = merged.rbegin(); it != merged.rend(); ++it) emit(it->first, it->second);
      return;
    }
  }
}

void PreTokenizer::add_split(SplitStep step) {
  Step s{Step::Kind::kSplit, {}, {}, {}};
  s.split.push_back(std::move(step));
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_byte_level(ByteLevelStep step) {
  gpt2_regex();  // compile once, before threads race for it
  steps_.push_back(Step{Step::Kind::kByteLevel, {}, step, {}});
}

void PreTokenizer::add_metaspace(MetaspaceStep step) {
  steps_.push_back(Step{Step::Kind::kMetaspace, {}, {}, std::move(step)});
}

bool PreTokenizer::maps_bytes() const {
  for (const Step& s : steps_) {
    if (s.kind == Step::Kind::kByteLevel) return true;
  }
  return false;
}

void PreTokenizer::run(std::string_view text, std::vector<std::string_view>& words,
                       std::deque<std::string>& storage, bool at_input_start) const {
  words.clear();
  if (text.empty()) return;
  words.push_back(text);
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    if (step.kind == Step::Kind::kSplit) {
      const SplitStep& s = step.split.front();
      for (const std::string_view w : words) split_by_regex(w, s.regex, s.behavior, s.invert, next);
    } else if (step.kind == Step::Kind::kMetaspace) {
      // Only the leading word can sit at offset 0 of the input (earlier steps keep it in front).
      for (size_t i = 0; i < words.size(); ++i)
        run_metaspace(step.metaspace, words[i], at_input_start && i == 0, next, storage);
    } else {
      const ByteLevelStep& b = step.byte_level;
      for (std::string_view w : words) {
        // Like tokenizers, the prefix space goes in front of every piece that reaches this step.
        if (b.add_prefix_space && w.front() != ' ') {
          storage.emplace_back(" ").append(w);
          w = storage.back();
        }
        const size_t first = next.size();
        if (b.use_regex) {
          split_by_regex(w, gpt2_regex(), SplitBehavior::kIsolated, false, next);
        } else {
          next.push_back(w);
        }
        for (size_t i = first; i < next.size(); ++i) {
          std::string& mapped = storage.emplace_back();
          mapped.reserve(next[i].size() * 2);
          byte_level::append_mapped(next[i], mapped);
          next[i] = mapped;
        }
      }
    }
    words.swap(next);
  }
}

}  // namespace rqat::tokenizer
