// Stop strings during generation: the generated text grows by each token's bytes, and only its tail
// (the new bytes plus the longest stop string minus one) is searched, so a step costs O(new bytes).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rqat::generation {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(const std::vector<std::string>* stops = nullptr) : stops_(stops) {}
  bool enabled() const { return stops_ != nullptr && !stops_->empty(); }

  // Appends bytes to the text seen so far; true when a stop string now occurs in it.
  bool push(std::string_view bytes);
  const std::string& text() const { return text_; }

 private:
  const std::vector<std::string>* stops_;
  std::string text_;
};

// Position of the earliest occurrence of any stop string in text (npos if none).
size_t find_first_stop(std::string_view text, const std::vector<std::string>& stops);

}  // namespace rqat::generation
