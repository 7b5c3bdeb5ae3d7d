// Sweeps of an experiment: a grid (every combination) crossed with zipped lists (advanced
// together).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rqat::experiment {

struct SweepAxis {
  std::string name;
  std::vector<std::string> values;
};

struct Sweep {
  std::vector<SweepAxis> grid;             // outermost first
  std::vector<SweepAxis> zip;              // all of one length
  std::vector<std::string> names() const;  // grid names, then zip names
};

// One assignment of every sweep variable, in names() order.
using SweepPoint = std::vector<std::pair<std::string, std::string>>;

// How many points expand_sweep returns: the grid's sizes multiplied, times the zip length.
// Saturates at UINT64_MAX instead of wrapping, so 30 axes of 10 values are "too many", not a
// small wrapped number.
uint64_t sweep_size(const Sweep& sweep);

// All points: the grid's cartesian product (first axis outermost), each crossed with the zip's
// positions. No axes: one empty point. Zip lengths must agree, and the caller bounds
// sweep_size() first (read_experiment_spec refuses more than ExperimentLimits::max_sweep_points),
// since the points are materialized.
std::vector<SweepPoint> expand_sweep(const Sweep& sweep);

}  // namespace rqat::experiment
