// Worker-indexed parallelism for CPU kernels whose work splits into independent items with a
// per-worker workspace (images, weight-gradient panels, channels): how many workers to plan for,
// an even split of the items, and a run of one body per worker on the thread pool of
// tensor/parallel.h. Each item is computed by one worker in a fixed order, so results do not
// depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ember/tensor/parallel.h"

namespace ember::cpu {

// More workers than this would multiply per-worker workspaces for little gain on these sizes.
inline constexpr int kMaxWorkers = 16;

// The workers to plan for: the pool's thread count (set_num_threads), clamped to [1, kMaxWorkers].
inline int worker_limit() { return std::clamp(get_num_threads(), 1, kMaxWorkers); }

// The items [lo, hi) of `worker` when `items` are split evenly among `workers`.
inline void share_of(int64_t items, int workers, int worker, int64_t& lo, int64_t& hi) {
  lo = items * worker / workers;
  hi = items * (worker + 1) / workers;
}

// Runs body(worker) once for each worker in [0, workers) on the pool; a thread may run several
// workers one after another (fewer threads than workers, or inside another parallel loop), each
// with its own worker index and so its own workspace. `body` must not throw.
template <typename F>
void run_workers(int workers, const F& body) {
  parallel_for(0, workers, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t w = lo; w < hi; ++w) body(int(w));
  });
}

}  // namespace ember::cpu
