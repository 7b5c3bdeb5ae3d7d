// See byte_level.h. The table is GPT-2's bytes_to_unicode: bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF keep their value, the other 68 bytes take U+0100 + n in byte order.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace rqat::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte{};  // code point -> byte, -1 when not in the alphabet

  Tables() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keeps =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = keeps ? static_cast<char32_t>(b) : next++;
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

void append_mapped(std::string_view bytes, std::string& out) {
  const auto& t = tables().to_char;
  for (const char c : bytes) out.append(t[static_cast<unsigned char>(c)]);
}

std::string_view mapped_char(unsigned char b) { return tables().to_char[b]; }

void append_token_bytes(std::string_view token, std::string& out) {
  const auto& to_byte = tables().to_byte;
  const size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    char32_t cp = 0;
    const size_t n = utf8::decode(token, i, cp);
    if (n == 0 || cp >= to_byte.size() || to_byte[cp] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(to_byte[cp]));
    i += n;
  }
}

}  // namespace rqat::tokenizer::byte_level
