// See normalizer.h.
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "io/error.h"

namespace rqat::tokenizer {
namespace {

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

int options_of(Normalizer::Form form) {
  switch (form) {
    case Normalizer::Form::kNFC:
      return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case Normalizer::Form::kNFD:
      return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case Normalizer::Form::kNFKC:
      return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case Normalizer::Form::kNFKD:
      return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  return 0;
}

}  // namespace

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (forms_.empty() || is_ascii(text)) return text;
  std::string current(text);
  for (const Form form : forms_) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &out,
                     static_cast<utf8proc_option_t>(options_of(form)));
    if (n < 0) fail("tokenizer: cannot normalize text: {}", utf8proc_errmsg(n));
    current.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }
  scratch = std::move(current);
  return scratch;
}

}  // namespace rqat::tokenizer
