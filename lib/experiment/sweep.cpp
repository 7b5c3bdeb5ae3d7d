#include "experiment/sweep.h"

#include <limits>

namespace rqat::experiment {

namespace {

uint64_t saturating_multiply(uint64_t a, uint64_t b) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (a != 0 && b > kMax / a) return kMax;
  return a * b;
}

}  // namespace

uint64_t sweep_size(const Sweep& sweep) {
  uint64_t points = 1;
  for (const auto& axis : sweep.grid) points = saturating_multiply(points, axis.values.size());
  if (!sweep.zip.empty()) points = saturating_multiply(points, sweep.zip.front().values.size());
  return points;
}

std::vector<std::string> Sweep::names() const {
  std::vector<std::string> names;
  for (const auto& axis : grid) names.push_back(axis.name);
  for (const auto& axis : zip) names.push_back(axis.name);
  return names;
}

std::vector<SweepPoint> expand_sweep(const Sweep& sweep) {
  std::vector<SweepPoint> points{SweepPoint{}};
  for (const auto& axis : sweep.grid) {
    std::vector<SweepPoint> next;
    for (const auto& point : points) {
      for (const auto& value : axis.values) {
        auto extended = point;
        extended.emplace_back(axis.name, value);
        next.push_back(std::move(extended));
      }
    }
    points = std::move(next);
  }
  if (sweep.zip.empty()) return points;
  const size_t length = sweep.zip.front().values.size();
  std::vector<SweepPoint> crossed;
  for (const auto& point : points) {
    for (size_t i = 0; i < length; ++i) {
      auto extended = point;
      for (const auto& axis : sweep.zip) extended.emplace_back(axis.name, axis.values.at(i));
      crossed.push_back(std::move(extended));
    }
  }
  return crossed;
}

}  // namespace rqat::experiment
