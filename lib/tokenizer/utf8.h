// UTF-8 helpers of the tokenizer: validating/decoding code points, U+FFFD repair with the same
// "maximal subpart" rule as Rust's String::from_utf8_lossy (what Hugging Face decode returns), the
// split point for streaming, and the Unicode predicates added-token matching needs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rqat::tokenizer::utf8 {

// Length of the valid UTF-8 sequence starting at s[i] (1-4) with its code point in cp, or 0.
size_t decode(std::string_view s, size_t i, char32_t& cp);

void append(std::string& out, char32_t cp);

bool is_valid(std::string_view s);

// Replaces every maximal invalid subpart by U+FFFD.
std::string to_valid(std::string_view bytes);

// Length of the longest prefix that does not end inside a sequence that is incomplete but could
// still become valid: the rest waits for more bytes.
size_t complete_prefix(std::string_view bytes);

// Unicode White_Space (Rust's char::is_whitespace and regex \s).
bool is_white_space(char32_t cp);

// Rust regex \w: alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t cp);

// Start of the code point that ends at `end` (end > 0, s valid UTF-8).
size_t previous_start(std::string_view s, size_t end);

}  // namespace rqat::tokenizer::utf8
