// Timing shared by the GPU benchmarks (bench/*.cpp): the median over `reps` repetitions of the mean
// time of `iters` back-to-back calls, from CUDA events on the current stream, after 3 warm-up
// calls. What bench/lib/timing.py does for the PyTorch side.
#pragma once
#include <algorithm>
#include <vector>

#include "ember.h"

namespace ember::bench {

template <typename F>
double time_ms(F f, int iters = 20, int reps = 5) {
  Stream s = current_stream(Device::cuda());
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    Event a(true), b(true);
    a.record(s);
    for (int i = 0; i < iters; ++i) f();
    b.record(s);
    b.synchronize();
    t.push_back(a.elapsed_ms(b) / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace ember::bench
