// See normalizer.h.
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "io/error.h"
#include "tokenizer/growth_limit.h"

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

void normalize_form(Normalizer::Form form, std::string& text) {
  if (is_ascii(text)) return;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options_of(form)));
  if (n < 0) fail("tokenizer: cannot normalize text: {}", utf8proc_errmsg(n));
  text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
}

// Rebuilds `text` with each [begin, end) range replaced by `content`.
void replace_ranges(std::string& text, const std::vector<std::pair<size_t, size_t>>& ranges,
                    const std::string& content) {
  if (ranges.empty()) return;
  std::string out;
  out.reserve(text.size() + ranges.size() * content.size());
  size_t prev = 0;
  for (const auto& [b, e] : ranges) {
    out.append(text, prev, b - prev);
    out += content;
    prev = e;
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

}  // namespace

Normalizer::Normalizer(std::vector<Form> forms) {
  for (const Form f : forms) add_form(f);
}

void Normalizer::add_form(Form form) {
  Step s;
  s.kind = Step::Kind::kForm;
  s.form = form;
  steps_.push_back(std::move(s));
  forms_.push_back(form);
}

void Normalizer::add_prepend(std::string prefix) {
  Step s;
  s.kind = Step::Kind::kPrepend;
  s.text = std::move(prefix);
  steps_.push_back(std::move(s));
  only_forms_ = false;
}

void Normalizer::add_replace(std::string literal, std::string content) {
  if (literal.empty()) fail("tokenizer: a Replace normalizer needs a non-empty pattern");
  Step s;
  s.kind = Step::Kind::kReplace;
  s.text = std::move(literal);
  s.content = std::move(content);
  steps_.push_back(std::move(s));
  only_forms_ = false;
}

void Normalizer::add_replace(Regex pattern, std::string content) {
  Step s;
  s.kind = Step::Kind::kReplace;
  s.regex.emplace(std::move(pattern));
  s.content = std::move(content);
  steps_.push_back(std::move(s));
  only_forms_ = false;
}

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (steps_.empty() || (only_forms_ && is_ascii(text))) return text;
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kForm:
        normalize_form(step.form, current);
        break;
      case Step::Kind::kPrepend:
        if (!current.empty()) {
          check_text_growth(current.size() + step.text.size(), text.size(), where_, "a text");
          current.insert(0, step.text);
        }
        break;
      case Step::Kind::kReplace: {
        ranges.clear();
        if (step.regex) {
          step.regex->find_all(current, ranges);
        } else {
          for (size_t at = current.find(step.text); at != std::string::npos;
               at = current.find(step.text, at + step.text.size())) {
            ranges.emplace_back(at, at + step.text.size());
          }
        }
        check_text_growth(size_after_replacing(current.size(), ranges, step.content.size()),
                          text.size(), where_, "a text");
        replace_ranges(current, ranges, step.content);
        break;
      }
    }
    check_text_growth(current.size(), text.size(), where_, "a text");
  }
  scratch = std::move(current);
  return scratch;
}

}  // namespace rqat::tokenizer
