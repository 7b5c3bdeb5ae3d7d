// The byte-level alphabet of GPT-2-style BPE: every byte stands for one printable code point
// (printable Latin-1 bytes for themselves, the rest for U+0100...), so every token is a string.
#pragma once

#include <string>
#include <string_view>

namespace rqat::tokenizer::byte_level {

// Appends the UTF-8 of the code point standing for each byte of `bytes`.
void append_mapped(std::string_view bytes, std::string& out);

// The UTF-8 of the code point standing for byte b.
std::string_view mapped_char(unsigned char b);

// Appends the bytes a token string stands for. Like Hugging Face's ByteLevel decoder, a token with
// any character outside the alphabet (an added token such as "<｜User｜>") is taken as it is.
void append_token_bytes(std::string_view token, std::string& out);

}  // namespace rqat::tokenizer::byte_level
