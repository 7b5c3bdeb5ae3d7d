// See decoder.h. Each step follows the decode_chain of the same-named decoder in tokenizers
// (decoders/{byte_fallback,fuse,strip,sequence}.rs, normalizers/replace.rs, pre_tokenizers/
// metaspace.rs, pre_tokenizers/byte_level.rs).
#include "tokenizer/decoder.h"

#include <string_view>

#include "tokenizer/growth_limit.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace rqat::tokenizer {
namespace {

// The byte of a "<0xAB>" token, or -1.
int byte_token_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  int value = 0;
  for (const char c : token.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// The byte ranges Replace substitutes in one token.
std::vector<std::pair<size_t, size_t>> replace_ranges(const std::string& token,
                                                      const DecoderStep& step) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (step.regex) {
    // Streamed byte tokens may leave half a character here; a regex needs whole ones.
    if (!utf8::is_valid(token)) return ranges;
    step.regex->find_all(token, ranges);
  } else if (!step.pattern.empty()) {
    for (size_t at = token.find(step.pattern); at != std::string::npos;
         at = token.find(step.pattern, at + step.pattern.size())) {
      ranges.emplace_back(at, at + step.pattern.size());
    }
  }
  return ranges;
}

std::string apply_ranges(const std::string& token,
                         const std::vector<std::pair<size_t, size_t>>& ranges,
                         const DecoderStep& step) {
  if (ranges.empty()) return token;
  std::string out;
  size_t prev = 0;
  for (const auto& [b, e] : ranges) {
    out.append(token, prev, b - prev);
    out += step.content;
    prev = e;
  }
  out.append(token, prev, std::string::npos);
  return out;
}

// Strip: up to `start` leading and `stop` trailing copies of the character `c` (whole code points).
std::string strip(const std::string& token, const std::string& c, size_t start, size_t stop) {
  if (c.empty()) return token;
  size_t begin = 0, end = token.size();
  for (size_t i = 0;
       i < start && end - begin >= c.size() && std::string_view(token).substr(begin).starts_with(c);
       ++i) {
    begin += c.size();
  }
  for (size_t i = 0; i < stop && end - begin >= c.size() &&
                     std::string_view(token).substr(begin, end - begin).ends_with(c);
       ++i) {
    end -= c.size();
  }
  return token.substr(begin, end - begin);
}

std::string metaspace(const std::string& token, const std::string& replacement, bool drop) {
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    if (!replacement.empty() && std::string_view(token).substr(i).starts_with(replacement)) {
      if (!drop) out += ' ';
      i += replacement.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

size_t total_size(const std::vector<std::string>& tokens) {
  size_t n = 0;
  for (const std::string& t : tokens) n += t.size();
  return n;
}

}  // namespace

std::vector<std::string> Decoder::run(std::vector<std::string> tokens, bool stream,
                                      bool first) const {
  const size_t input_size = total_size(tokens);
  bool fused = false;  // a Fuse ran: the list now stands for the whole text
  for (const DecoderStep& step : steps_) {
    std::vector<std::string> next;
    next.reserve(tokens.size());
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) byte_level::append_token_bytes(t, bytes);
        next.push_back(stream ? std::move(bytes) : utf8::to_valid(bytes));
        fused = true;
        break;
      }
      case DecoderStep::Kind::kReplace: {
        // Sizes are checked before each token is rebuilt, so no huge string is ever allocated.
        size_t size = 0;
        for (const std::string& t : tokens) {
          const auto ranges = replace_ranges(t, step);
          size += size_after_replacing(t.size(), ranges, step.content.size());
          check_text_growth(size, input_size, where_, "tokens");
          next.push_back(apply_ranges(t, ranges, step));
        }
        break;
      }
      case DecoderStep::Kind::kByteFallback: {
        // Consecutive byte tokens form one string when valid UTF-8, else one U+FFFD per byte.
        std::string pending;
        size_t pending_count = 0;
        auto flush = [&] {
          if (pending_count == 0) return;
          if (stream || utf8::is_valid(pending)) {
            next.push_back(pending);
          } else {
            for (size_t i = 0; i < pending_count; ++i) next.emplace_back("\xEF\xBF\xBD");
          }
          pending.clear();
          pending_count = 0;
        };
        for (const std::string& t : tokens) {
          if (const int b = byte_token_value(t); b >= 0) {
            pending.push_back(static_cast<char>(b));
            ++pending_count;
          } else {
            flush();
            next.push_back(t);
          }
        }
        flush();
        break;
      }
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next.push_back(std::move(all));
        fused = true;
        break;
      }
      case DecoderStep::Kind::kStrip:
        for (const std::string& t : tokens) {
          if (stream && fused) {
            next.push_back(first ? strip(t, step.content, step.start, 0) : t);
          } else {
            next.push_back(strip(t, step.content, step.start, step.stop));
          }
        }
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool is_first = i == 0 && (!stream || first);
          next.push_back(metaspace(tokens[i], step.pattern, is_first && step.prepend));
        }
        break;
    }
    tokens = std::move(next);
    check_text_growth(total_size(tokens), input_size, where_, "tokens");
  }
  return tokens;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  for (const std::string& t : run(std::move(tokens), false, false)) out += t;
  return out;
}

std::string Decoder::token_bytes(const std::string& token, bool first) const {
  std::string out;
  for (const std::string& t : run({token}, true, first)) out += t;
  return out;
}

}  // namespace rqat::tokenizer
