// A per-comparison work budget for the grader: a step counter plus a steady_clock deadline, checked
// inside the parser and evaluator loops, so a pathological answer stops quickly on any thread
// (no signals, no watchdog thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace rqat::eval {

// Size limits shared by normalization, structure splitting and the parser. A longer answer is
// compared as text only and a deeper one is not parsed: no real answer comes near them, while a
// degenerate completion can, and recursion depth must stay far below what a thread's stack holds.
inline constexpr std::size_t kMaxAnswerChars = 20'000;
inline constexpr int kMaxNesting = 200;  // parser recursion, expression tree height, brace groups
inline constexpr int kMaxStructureNesting = 32;  // tuples of tuples of ... compared element-wise

// Thrown when a comparison runs out of its budget; grade() turns it into GradeKind::timeout.
class Timeout : public std::runtime_error {
 public:
  Timeout() : std::runtime_error("grading timed out") {}
};

class Budget {
 public:
  explicit Budget(std::chrono::milliseconds timeout, std::uint64_t max_steps = 20'000'000)
      : deadline_(std::chrono::steady_clock::now() + timeout), max_steps_(max_steps) {}

  // Counts `cost` units of work; every 64 units the clock is read.
  void tick(std::uint64_t cost = 1) {
    steps_ += cost;
    if (steps_ > max_steps_) throw Timeout();
    if ((steps_ & 63) == 0 || cost > 1) {
      if (std::chrono::steady_clock::now() > deadline_) throw Timeout();
    }
  }
  // Charges for scanning `chars` characters of text (one step per 64), so extraction and
  // normalization of long completions count against the same deadline as parsing.
  void scan(std::size_t chars) { tick(1 + chars / 64); }
  std::uint64_t steps() const { return steps_; }

 private:
  std::chrono::steady_clock::time_point deadline_;
  std::uint64_t max_steps_;
  std::uint64_t steps_ = 0;
};

}  // namespace rqat::eval
