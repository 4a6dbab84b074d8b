// Timing shared by the GPU benchmarks (bench/*.cpp): the median over `reps` repetitions of the mean
// time of `iters` back-to-back calls, from CUDA events on the current stream, after warm-up calls;
// host_ms, the host's share of a call; and run_section, which reports a failing section of a
// benchmark and lets the next one run.
// What bench/lib/timing.py does for the PyTorch side. mean_ms and median are the pieces, for a
// benchmark that interleaves the repetitions of two variants (so clock drift hits both alike).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "ember/ember.h"

namespace ember::bench {

// Mean ms of one call of `f` over `iters` back-to-back calls (waits for them).
template <typename F>
double mean_ms(F&& f, int iters) {
  Stream s = current_stream(Device::cuda());
  Event a(true), b(true);
  a.record(s);
  for (int i = 0; i < iters; ++i) f();
  b.record(s);
  b.synchronize();
  return a.elapsed_ms(b) / iters;
}

// The middle sample (the upper one of the two middles for an even count); samples is not empty.
inline double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <typename F>
double time_ms(F&& f, int iters = 20, int reps = 5, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(mean_ms(f, iters));
  return median(std::move(t));
}

// The host's time to enqueue one call of `f` (ms): `iters` calls from an idle GPU, timed until the
// last one returns, not until the GPU finishes them. A benchmark whose time_ms is about its host_ms
// measures the host (launch and framework overhead), not the kernels.
template <typename F>
double host_ms(F&& f, int iters = 20) {
  Stream s = current_stream(Device::cuda());
  s.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  s.synchronize();
  return ms / iters;
}

// Runs one section of a benchmark; a section that throws is reported as a JSON line naming it and
// the error, and the next section still runs.
template <typename F>
void run_section(const char* name, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::printf("{\"bench\":\"%s\",\"error\":\"%s\"}\n", name, e.what());
  }
}

}  // namespace ember::bench
