// Comparison helpers shared by the test suites (header-only).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ember/ember.h"

namespace ember::testing {

namespace detail {
// max |a - ref| / max(floor, max |ref|), both read as fp64. A NaN where the reference has a number
// (or the other way round) is an infinite error; NaN against NaN matches.
inline double scaled_max_err(const Tensor& a, const Tensor& ref, double floor) {
  const std::vector<double> x = a.to_vector(), y = ref.to_vector();
  REQUIRE(x.size() == y.size());
  double scale = floor, err = 0;
  for (double v : y)
    if (!std::isnan(v)) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return std::numeric_limits<double>::infinity();
    if (!std::isnan(x[i])) err = std::max(err, std::abs(x[i] - y[i]));
  }
  return err / scale;
}
}  // namespace detail

// max |a - ref| relative to max(1, max |ref|).
inline double rel_err(const Tensor& a, const Tensor& ref) {
  return detail::scaled_max_err(a, ref, 1);
}

// max |a - ref| relative to max |ref| alone: for references much smaller than 1 this is stricter
// than rel_err (the convolution suites use it).
inline double rel_err_to_max(const Tensor& a, const Tensor& ref) {
  return detail::scaled_max_err(a, ref, 1e-12);
}

// The CUDA-vs-CPU-fp64 parity bound for one op's output in `dtype` (rel_err); suites that need a
// tighter fp32 bound say so beside their use.
inline double parity_tolerance(DType d) {
  switch (d) {
    case DType::f32:
      return 1e-4;
    case DType::f16:
      return 1e-2;
    case DType::bf16:
      return 5e-2;
    default:
      return 1e-12;
  }
}

// A GPU tensor's exact values as a CPU fp64 tensor, cut from the autograd graph: the reference
// input of a CUDA-vs-CPU comparison.
inline Tensor cpu_f64(const Tensor& g) { return g.detach().to(Device::cpu(), DType::f64); }

// Whether t's values, read as fp64 in logical order, match `expected` within a relative tolerance
// (|v - e| <= tol * (1 + |e|)) element by element, and the counts agree.
inline bool near_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  const std::vector<double> v = t.to_vector();
  if (v.size() != expected.size()) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (std::abs(v[i] - expected[i]) > tol * (1 + std::abs(expected[i]))) return false;
  return true;
}

}  // namespace ember::testing
