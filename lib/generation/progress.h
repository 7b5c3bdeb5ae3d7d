// The generation progress line on stderr: prompts done / total, generated tokens/s and an ETA,
// redrawn in place with \r at most a few times per second and ended with a newline.
#pragma once

#include <chrono>
#include <cstdint>

namespace rqat::generation {

class ProgressLine {
 public:
  ProgressLine(bool enabled, int64_t total_prompts);
  ~ProgressLine();  // finishes the line if anything was printed

  // Redraws when at least the refresh interval passed since the last draw (or when forced).
  void update(int64_t prompts_done, int64_t generated_tokens, bool force = false);
  void finish(int64_t prompts_done, int64_t generated_tokens);

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool drawn_ = false;
  bool finished_ = false;
  int64_t total_;
  Clock::time_point start_, last_;
};

}  // namespace rqat::generation
