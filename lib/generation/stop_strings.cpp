// See stop_strings.h.
#include "generation/stop_strings.h"

namespace rqat::generation {

bool StopStringMatcher::push(std::string_view bytes) {
  if (!enabled() || bytes.empty()) return false;
  const size_t old = text_.size();
  text_.append(bytes);
  for (const auto& stop : *stops_) {
    const size_t from = old + 1 >= stop.size() ? old + 1 - stop.size() : 0;
    if (text_.find(stop, from) != std::string::npos) return true;
  }
  return false;
}

size_t find_first_stop(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = std::string_view::npos;
  for (const auto& stop : stops) {
    const size_t at = text.find(stop);
    if (at < best) best = at;
  }
  return best;
}

}  // namespace rqat::generation
