// The mean and the sample variance of a list of numbers, for the report's pooling over problems
// and training seeds (findings.cpp, run_report.cpp). The experiment layer does not reach eval's
// metrics (lib/CMakeLists.txt), whose mean_and_standard_error serves the evaluations.
#pragma once

#include <vector>

namespace rqat::experiment {

inline double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// With n - 1 in the denominator; needs two values.
inline double sample_variance(const std::vector<double>& values) {
  const double mean = mean_of(values);
  double squares = 0;
  for (const double v : values) squares += (v - mean) * (v - mean);
  return squares / static_cast<double>(values.size() - 1);
}

}  // namespace rqat::experiment
