// The AlgoCache's benchmark: timing each usable candidate of a miss on scratch outputs (warm-up,
// pruning of hopeless candidates, refinement of close ones), with the timing hooks a backend lends
// (dispatch/benchmark_hooks.h), and the table of those hooks.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache_impl.h"
#include "ember/dispatch/benchmark_hooks.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::dispatch {

// ---- hooks ------------------------------------------------------------------------------------

namespace {
struct HookTable {
  std::mutex mutex;
  std::array<BenchmarkHooks, kNumDeviceTypes> hooks{};
};
HookTable& hook_table() {
  static HookTable* table = new HookTable();  // leaked: backends register during static init
  return *table;
}
}  // namespace

void set_benchmark_hooks(DeviceType device_type, const BenchmarkHooks& hooks) {
  HookTable& t = hook_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.hooks[int(device_type)] = hooks;
}

BenchmarkHooks benchmark_hooks(DeviceType device_type) {
  HookTable& t = hook_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.hooks[int(device_type)];
}

// ---- timing -----------------------------------------------------------------------------------

namespace {

// Times one candidate on the scratch problem: one warm-up run, then up to `reps` timed runs.
// CPU: steady_clock per run, minimum. CUDA: events on the current stream around `reps` runs, mean,
// enqueued behind the backend's hold (BenchmarkHooks::hold_stream) long enough for the host to
// enqueue them all, so the runs go back to back and the events time the GPU alone: the steady
// state of a captured step, where host launch overhead is gone. (Timed at the host's pace, a short
// problem ranks the algorithms of one kernel above faster ones of two.)
// Pruning: when the warm-up run alone took longer than `prune_above_ms` (a multiple of the fastest
// candidate so far), the candidate cannot win: its warm-up time is returned and `c.pruned` set.
// That keeps a slow algorithm (a direct or FFT convolution on a large layer) from costing four
// runs per new shape on the first step.
double time_candidate(const AlgoSlot& slot, const detail::ErasedProblem& p, const void* scratch,
                      Candidate& c, int reps,
                      double prune_above_ms = std::numeric_limits<double>::infinity()) {
  constexpr double kCpuBudgetMs = 200;  // stop repeating a slow CPU candidate early
  constexpr double kCpuOneRunMs = 25;   // after a CPU warm-up this long, one timed run
  const void* algo = slot.algorithm_ptr(c.index);
  DataPtr workspace{};
  if (c.workspace_bytes > 0) workspace = allocate(c.workspace_bytes, p.device);
  struct FreeOnExit {
    DataPtr& d;
    ~FreeOnExit() {
      if (d.deleter) d.deleter(d.ptr);
    }
  } free_on_exit{workspace};
  c.pruned = false;

  // Pruning looks at up to two warm-up runs: a first call may pay one-time work (a library's
  // plan search, host gaps between its launches while it sets up) that says nothing about the
  // candidate's speed, so a first run over the bar is run again and only a second one over it
  // prunes. A first run far over the bar (10x it, and more than 5 ms of one-time work above it)
  // prunes at once: running such candidates twice would double a large model's first-step
  // benchmarking.
  constexpr int kPruneWarmups = 2;
  const double hopeless_ms = std::max(10 * prune_above_ms, prune_above_ms + 5.0);
  const bool may_prune = prune_above_ms < std::numeric_limits<double>::infinity();
  if (p.device.is_cuda()) {
    const BenchmarkHooks hooks = benchmark_hooks(p.device.type);
    Stream stream = current_stream(p.device);
    Event warm_start(true), start(true), end(true);
    // Holds the stream while the host enqueues `runs` runs behind it: a few microseconds per
    // launch, so 50 us per run covers algorithms of a few launches (one whose enqueueing takes
    // longer is partly timed at the host's pace, as without the hold).
    auto hold_for = [&](int runs) {
      if (hooks.hold_stream) hooks.hold_stream(stream, 20.0 + 50.0 * runs);
    };
    // A run that paid one-time host work (BenchmarkHooks::setup_events: eager replay recorded or
    // captured it) is no warm-up: it runs again (twice at most: recorded, then captured), so the
    // warm-ups and the timed runs replay, as the op does in steady state.
    auto setup_events = [&]() -> int64_t { return hooks.setup_events ? hooks.setup_events() : 0; };
    int replay_setup_runs = 0;
    for (int w = 0; w < (may_prune ? kPruneWarmups : 1); ++w) {
      if (may_prune) hold_for(1);  // a warm-up that may prune is timed on the GPU alone too
      const int64_t setup_before = setup_events();
      warm_start.record(stream);
      p.run(algo, scratch, workspace.ptr);  // warm-up (and the first failure, if any)
      start.record(stream);
      if (setup_events() != setup_before && replay_setup_runs < 2) {
        ++replay_setup_runs;
        --w;
        continue;
      }
      if (!may_prune) break;
      start.synchronize();
      const double warm_ms = double(warm_start.elapsed_ms(start));
      if (warm_ms <= prune_above_ms) break;
      if (w + 1 == kPruneWarmups || warm_ms > hopeless_ms) {
        c.pruned = true;
        return warm_ms;
      }
    }
    hold_for(reps);
    start.record(stream);
    for (int r = 0; r < reps; ++r) p.run(algo, scratch, workspace.ptr);
    end.record(stream);
    end.synchronize();
    return double(start.elapsed_ms(end)) / reps;
  }
  using clock = std::chrono::steady_clock;
  double spent = 0;
  double best = std::numeric_limits<double>::infinity();
  for (int w = 0; w < kPruneWarmups; ++w) {
    auto t0 = clock::now();
    p.run(algo, scratch, workspace.ptr);
    const double warm_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    spent += warm_ms;
    if (warm_ms <= prune_above_ms) {
      // A CPU run this long is nearly its own measurement (steady_clock's error and a cold cache
      // are a few percent of it): one timed run follows, not three, and the faster of the two
      // counts (so a warm-up slowed by another process does not condemn a fast candidate).
      if (warm_ms >= kCpuOneRunMs) {
        reps = 1;
        best = warm_ms;
      }
      break;
    }
    if (w + 1 == kPruneWarmups || warm_ms > hopeless_ms) {
      c.pruned = true;
      return warm_ms;
    }
  }
  for (int r = 0; r < reps && (r == 0 || spent < kCpuBudgetMs); ++r) {
    auto t = clock::now();
    p.run(algo, scratch, workspace.ptr);
    double ms = std::chrono::duration<double, std::milli>(clock::now() - t).count();
    best = std::min(best, ms);
    spent += ms;
  }
  return best;
}

}  // namespace

const Candidate* AlgoCache::Impl::benchmark(const AlgoSlot& slot, const detail::ErasedProblem& p,
                                            CandidateSet& set, int refine_runs) {
  Impl& m = *this;
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<void> scratch;
  std::string scratch_failure;
  try {
    scratch = p.make_scratch(p.problem);
  } catch (const std::exception& e) {
    scratch_failure = first_line(e.what());
  }
  // Timed in the heuristic's order, the likely fastest first, so that pruning (a candidate whose
  // warm-up runs are kPruneRatio times slower than the fastest so far is not timed further; see
  // time_candidate) cuts the slow ones short.
  constexpr double kPruneRatio = 3.0;
  std::vector<Candidate*> order;
  for (Candidate& c : set.usable) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [&](const Candidate* a, const Candidate* b) {
    const void* pa = slot.algorithm_ptr(a->index);
    const void* pb = slot.algorithm_ptr(b->index);
    const bool ha = p.has_heuristic_cost(pa), hb = p.has_heuristic_cost(pb);
    if (ha != hb) return ha;
    return ha && p.heuristic_cost(pa, p.problem) < p.heuristic_cost(pb, p.problem);
  });
  // On the CPU, a candidate the cost model puts over kCpuCostRatio times the cheapest estimate is
  // not timed at all (it stays usable for the heuristic): even one warm-up run of a direct loop
  // nest on a large convolution costs seconds, and CPU estimates (unlike a GPU's) are within a
  // small factor of the measured times. Candidates without an estimate are always timed.
  if (p.device.is_cpu()) {
    constexpr double kCpuCostRatio = 8.0;
    double cheapest = std::numeric_limits<double>::infinity();
    for (const Candidate* c : order) {
      const void* algo = slot.algorithm_ptr(c->index);
      if (p.has_heuristic_cost(algo))
        cheapest = std::min(cheapest, p.heuristic_cost(algo, p.problem));
    }
    std::vector<Candidate*> kept;
    for (Candidate* c : order) {
      const void* algo = slot.algorithm_ptr(c->index);
      const double cost = p.has_heuristic_cost(algo) ? p.heuristic_cost(algo, p.problem) : 0;
      if (cheapest > 0 && cost > kCpuCostRatio * cheapest) {
        char why[96];
        std::snprintf(why, sizeof(why), " (estimate %.0fx the cheapest: not timed on the CPU)",
                      cost / cheapest);
        set.skipped.push_back(slot.algorithm_name(c->index) + why);
      } else {
        kept.push_back(c);
      }
    }
    order = std::move(kept);
  }
  const Candidate* best = nullptr;
  for (Candidate* cp : order) {
    Candidate& c = *cp;
    if (!scratch) {
      c.failure = "no scratch outputs: " + scratch_failure;
      continue;
    }
    try {
      const double prune_above =
          best ? best->time_ms * kPruneRatio : std::numeric_limits<double>::infinity();
      c.time_ms = time_candidate(slot, p, scratch.get(), c, 3, prune_above);
      m.candidates_timed.fetch_add(1, std::memory_order_relaxed);
      if (c.pruned) m.candidates_pruned.fetch_add(1, std::memory_order_relaxed);
      if (!best || c.time_ms < best->time_ms) best = &c;
    } catch (const std::exception& e) {
      // Out of memory, a launch failure, an unsupported corner: this candidate is out.
      c.time_ms = -1;
      c.failure = first_line(e.what());
      m.candidates_failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Refinement: three runs can misorder candidates within a few percent of each other (clocks,
  // caches, a library's first-call work), so the ones within 15% of the fastest are timed again
  // with more runs and the fastest of that round is chosen.
  if (best != nullptr && refine_runs > 0) {
    constexpr double kCloseRatio = 1.15;
    const double cutoff = best->time_ms * kCloseRatio;
    std::vector<Candidate*> close;
    for (Candidate& c : set.usable)
      if (c.time_ms >= 0 && !c.pruned && c.time_ms <= cutoff) close.push_back(&c);
    if (close.size() > 1) {
      const Candidate* refined_best = nullptr;
      for (Candidate* c : close) {
        try {
          c->time_ms = time_candidate(slot, p, scratch.get(), *c, refine_runs);
          if (!refined_best || c->time_ms < refined_best->time_ms) refined_best = c;
        } catch (const std::exception& e) {
          c->time_ms = -1;
          c->failure = first_line(e.what());
        }
      }
      if (refined_best != nullptr) best = refined_best;
    }
  }
  scratch.reset();
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  m.benchmark_ns.fetch_add(uint64_t(ns), std::memory_order_relaxed);
  m.benchmarks.fetch_add(1, std::memory_order_relaxed);
  return best;
}

}  // namespace ember::dispatch
