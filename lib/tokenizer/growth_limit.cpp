// See growth_limit.h.
#include "tokenizer/growth_limit.h"

#include "io/error.h"

namespace rqat::tokenizer {

void check_text_growth(size_t size, size_t input_size, const std::string& where,
                       std::string_view what) {
  const size_t limit = kMaxTextGrowth * input_size + kTextGrowthAllowance;
  if (size > limit) {
    fail("{}: makes {} of {} bytes grow past {} bytes ({}x plus {}); refusing", where, what,
         input_size, limit, kMaxTextGrowth, kTextGrowthAllowance);
  }
}

size_t size_after_replacing(size_t size, const std::vector<std::pair<size_t, size_t>>& ranges,
                            size_t content_size) {
  size_t removed = 0;
  for (const auto& [begin, end] : ranges) removed += end - begin;
  return size - removed + ranges.size() * content_size;
}

}  // namespace rqat::tokenizer
