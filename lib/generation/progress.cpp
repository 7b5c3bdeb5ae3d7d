// See progress.h.
#include "generation/progress.h"

#include <fmt/format.h>

#include <cstdio>

namespace rqat::generation {

namespace {

constexpr double kRefreshSeconds = 0.25;

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressLine::ProgressLine(bool enabled, int64_t total_prompts)
    : enabled_(enabled), total_(total_prompts), start_(Clock::now()), last_(start_) {}

ProgressLine::~ProgressLine() {
  if (enabled_ && drawn_ && !finished_) std::fputc('\n', stderr);
}

void ProgressLine::update(int64_t done, int64_t tokens, bool force) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (!force && std::chrono::duration<double>(now - last_).count() < kRefreshSeconds) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0;
  std::string eta = "?";
  if (done >= total_) {
    eta = "0:00";
  } else if (done > 0) {
    eta = clock_text(elapsed / static_cast<double>(done) * static_cast<double>(total_ - done));
  }
  const std::string line =
      fmt::format("\rgenerate: {}/{} prompts, {:.1f} tok/s, elapsed {}, ETA {}   ", done, total_,
                  rate, clock_text(elapsed), eta);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish(int64_t done, int64_t tokens) {
  if (!enabled_ || finished_) return;
  update(done, tokens, /*force=*/true);
  std::fputc('\n', stderr);
  finished_ = true;
}

}  // namespace rqat::generation
