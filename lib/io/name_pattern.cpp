// See name_pattern.h.
#include "io/name_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "io/error.h"

namespace rqat::io {

namespace {

// Longer patterns are no module-name patterns; the limits on matching bound the work per name
// (PCRE2's defaults are ten million steps, far more than any module name needs).
constexpr size_t kMaxPatternBytes = 4096;
constexpr uint32_t kMatchLimit = 100'000;
constexpr uint32_t kDepthLimit = 1'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct NamePattern::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

NamePattern::NamePattern(std::string_view pattern, std::string where)
    : pattern_(pattern), where_(std::move(where)) {
  if (pattern.size() > kMaxPatternBytes)
    fail("{}: a pattern of {} bytes is longer than rqat's limit of {}", where_, pattern.size(),
         kMaxPatternBytes);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  if (code->code == nullptr)
    fail("{}: '{}' is not a valid regular expression ({} at offset {})", where_, pattern,
         pcre2_message(error), offset);
  code_ = std::move(code);
}

bool NamePattern::full_match(std::string_view name) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
      pcre2_match_context_create(nullptr), pcre2_match_context_free);
  pcre2_set_match_limit(context.get(), kMatchLimit);
  pcre2_set_depth_limit(context.get(), kDepthLimit);
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(),
                             0, 0, data.get(), context.get());
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  fail("{}: matching '{}' against '{}' was stopped ({})", where_, pattern_, name,
       pcre2_message(rc));
}

}  // namespace rqat::io
