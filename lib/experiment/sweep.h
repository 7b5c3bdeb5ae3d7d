// Sweeps of an experiment: a grid (every combination) crossed with zipped lists (advanced
// together).
#pragma once

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

// All points: the grid's cartesian product (first axis outermost), each crossed with the zip's
// positions. No axes: one empty point. Zip lengths must agree (the caller validates with
// locations).
std::vector<SweepPoint> expand_sweep(const Sweep& sweep);

}  // namespace rqat::experiment
