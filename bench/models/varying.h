// bench_models (bench/models.cpp): the synthetic inputs and the percentile every row shares, and
// the varying-resolution row of issue 32 (bench/models/varying.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/ember.h"

namespace ember::bench {

// sin(0.001 i + 0.5) over the flat index of `shape`, computed in float64 on the CPU (as PyTorch's
// side does), then float32 on `device`. `first`: the batch's first sample in the world's batch
// (data parallel: rank * batch), so i runs over the world's flat index.
inline Tensor synthetic_images(const Shape& shape, int64_t first, Device device) {
  const double offset = double(first * (shape_numel(shape) / shape[0]));
  Tensor i = arange(offset, offset + double(shape_numel(shape)), 1, TensorOptions(DType::f64));
  return sin(i * 0.001 + 0.5).view(shape).to(device, DType::f32);
}

// Label j is (7 j) % classes, j counted from `first`.
inline Tensor synthetic_labels(int64_t n, int64_t first, int64_t classes, Device device) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) v[size_t(j)] = double((7 * (first + j)) % classes);
  return from_vector(v, {n}, TensorOptions(DType::i64)).to(device);
}

inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

inline constexpr const char* kVaryingRowId = "cifar18_varying_res";

struct VaryingOptions {
  Device device = Device::cpu();
  int64_t batch = 128, steps = 60, min_res = 24, max_res = 40;
  // One loop per entry, each from an empty algorithm cache and a fresh model: adaptive,
  // adaptive_tune (adaptive, calling tune_pending() after every step as the examples do),
  // benchmark, heuristic, graphed (adaptive through nn::GraphedStep, resolutions padded up to a
  // multiple of 8: three graphs).
  std::vector<std::string> modes = {"adaptive", "adaptive_tune", "benchmark", "heuristic",
                                    "graphed"};
};

// Prints one JSON line per mode; false when a loop's losses were not finite or did not fall.
bool run_varying_resolution_row(const VaryingOptions& o);

}  // namespace ember::bench
