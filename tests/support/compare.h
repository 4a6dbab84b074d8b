// Comparison helpers shared by the test suites (header-only).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ember.h"

namespace ember::testing {

// max |a - ref| relative to max(1, max |ref|), both read as fp64. A NaN where the reference has a
// number (or the other way round) is an infinite error; NaN against NaN matches.
inline double rel_err(const Tensor& a, const Tensor& ref) {
  const std::vector<double> x = a.to_vector(), y = ref.to_vector();
  REQUIRE(x.size() == y.size());
  double scale = 1, err = 0;
  for (double v : y)
    if (!std::isnan(v)) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return std::numeric_limits<double>::infinity();
    if (!std::isnan(x[i])) err = std::max(err, std::abs(x[i] - y[i]));
  }
  return err / scale;
}

}  // namespace ember::testing
