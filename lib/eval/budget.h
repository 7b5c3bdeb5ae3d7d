// A per-comparison work budget for the grader: a step counter plus a steady_clock deadline, checked
// inside the parser and evaluator loops, so a pathological answer stops quickly on any thread
// (no signals, no watchdog thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace rqat::eval {

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
  std::uint64_t steps() const { return steps_; }

 private:
  std::chrono::steady_clock::time_point deadline_;
  std::uint64_t max_steps_;
  std::uint64_t steps_ = 0;
};

}  // namespace rqat::eval
