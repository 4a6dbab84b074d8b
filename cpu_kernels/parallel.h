// Worker threads for CPU kernels whose work splits into independent items (images, weight-gradient
// panels, channels): how many threads the machine offers, an even split of the items, and a run of
// one body per worker. Each item is computed by one worker in a fixed order, so results do not
// depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

namespace ember::cpu {

// More threads than this would multiply per-thread workspaces for little gain on these sizes.
inline constexpr int kMaxThreads = 16;

// The hardware's threads, clamped to [1, kMaxThreads].
inline int hardware_threads() {
  static const int hardware = std::clamp(int(std::thread::hardware_concurrency()), 1, kMaxThreads);
  return hardware;
}

// The items [lo, hi) of `worker` when `items` are split evenly among `workers`.
inline void share_of(int64_t items, int workers, int worker, int64_t& lo, int64_t& hi) {
  lo = items * worker / workers;
  hi = items * (worker + 1) / workers;
}

// Runs body(worker) for worker in [0, workers), worker 0 on the calling thread. If the system
// refuses a thread, the caller runs that worker's share itself. `body` must not throw. Starting a
// thread costs tens of microseconds: callers keep small problems on one worker.
template <typename F>
void run_workers(int workers, const F& body) {
  std::vector<std::thread> pool;
  pool.reserve(size_t(workers));
  int inline_from = workers;
  for (int t = 1; t < workers; ++t) {
    try {
      pool.emplace_back([&body, t] { body(t); });
    } catch (const std::system_error&) {
      inline_from = t;
      break;
    }
  }
  body(0);
  for (int t = inline_from; t < workers; ++t) body(t);
  for (std::thread& th : pool) th.join();
}

}  // namespace ember::cpu
