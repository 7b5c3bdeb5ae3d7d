// The bound on how much a tokenizer.json pipeline (normalizer or decoder chain) may make a text
// grow. Real chains grow text at most a few times (" " -> "▁" triples a space; NFKC expands a few
// ligatures up to 18 characters; decoders shrink "<0xE2>" to one byte), while Replace steps that
// each double the text would ask for 2^steps bytes. Sizes are checked before a step builds its
// output, so no huge string is ever allocated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rqat::tokenizer {

inline constexpr size_t kMaxTextGrowth = 32;         // times the input
inline constexpr size_t kTextGrowthAllowance = 4096;  // bytes on top

// Fails with "WHERE: makes WHAT of N bytes grow past LIMIT bytes (...)" when `size` exceeds the
// bound for an input of `input_size` bytes.
void check_text_growth(size_t size, size_t input_size, const std::string& where,
                       std::string_view what);

// The size of a text of `size` bytes once `ranges` of it are replaced by `content_size` bytes each.
size_t size_after_replacing(size_t size, const std::vector<std::pair<size_t, size_t>>& ranges,
                            size_t content_size);

}  // namespace rqat::tokenizer
