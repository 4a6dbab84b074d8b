// The AlgoCache: for a problem described by an AlgoKey, chooses one of the algorithms registered
// in its slot (dispatch/algorithm.h), remembers the choice, and runs it. How it chooses is set by
// AlgoSettings, globally or per thread with AlgoSettingsGuard:
//   heuristic      rules only (each algorithm's heuristic_cost), never timing
//   benchmark      on a miss, time every applicable candidate on scratch outputs, keep the fastest
//   deterministic  only deterministic candidates, chosen by the heuristic (so the choice, and with
//                  it the result, is the same run to run)
//   adaptive       benchmark mode with budgets, for shapes that vary: a new key borrows the timed
//                  choice of a key in its size class (size_class_key) when there is one, else
//                  times only the cost model's top-k candidates while the timing budget lasts,
//                  else takes the heuristic's choice; borrowed and heuristic entries are timed
//                  later, when the budget allows (AdaptiveSettings, tune_pending())
//   forced         AlgoSettings::forced names the algorithm for an op (or op.direction)
// plus a workspace limit in bytes. The dynamic-shape policy, persistence and the environment
// variables are described in docs/dispatch.md.
//
// A hit usually writes no shared memory and takes no lock: each thread remembers its recent hits
// (valid until the cache next changes) and counts its own hits. Otherwise a lookup takes one of 16
// shard locks in shared mode; no global mutex is on the hot path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "ember/dispatch/algo_key.h"
#include "ember/dispatch/algorithm.h"

namespace ember::dispatch {

// ---- settings ---------------------------------------------------------------------------------

enum class AlgoMode : uint8_t { heuristic, benchmark, deterministic, adaptive };
const char* algo_mode_name(AlgoMode m);
AlgoMode algo_mode_from_name(std::string_view name);  // throws bad_param

// The budgets of adaptive mode (docs/dispatch.md, "Adaptive mode"). Timing is paid from two
// pools: the warm-up pool (initial_budget_ms, spent once per cache: a model's first steps) and
// the steady pool, which refills at timing_share of the wall time and at every tune_pending(),
// up to step_budget_ms. A key with no timed key in its size class is timed from either pool; a
// borrowed or heuristic entry is re-timed from the steady pool only, so a shape storm costs at
// most timing_share of the run once its size classes are known.
struct AdaptiveSettings {
  int top_k = 3;                    // candidates timed per key, the cost model's best first
  int max_timed_keys_per_op = 32;   // distinct keys timed per op.direction and device type
  double initial_budget_ms = 2000;  // the warm-up pool
  double step_budget_ms = 200;      // the steady pool's cap, and what tune_pending() grants
  double timing_share = 0.1;        // the steady pool's refill, a fraction of wall time
  int refine_runs = 10;             // runs per close candidate in the refinement round (0: none)
};

struct AlgoSettings {
  AlgoMode mode = AlgoMode::heuristic;
  AdaptiveSettings adaptive;  // used in adaptive mode only
  // Candidates needing more workspace are skipped; 0 leaves only zero-workspace algorithms.
  size_t workspace_limit_bytes = kNoWorkspaceLimit;
  // "conv2d" or "conv2d.backward_filter" -> algorithm name; "op.direction" wins over "op".
  // A forced name that is unknown, does not apply, is over the workspace limit or (in
  // deterministic mode) is not deterministic is an error, never silently replaced.
  std::map<std::string, std::string, std::less<>> forced;

  AlgoSettings& with_mode(AlgoMode m) {
    mode = m;
    return *this;
  }
  AlgoSettings& with_workspace_limit(size_t bytes) {
    workspace_limit_bytes = bytes;
    return *this;
  }
  AlgoSettings& force(std::string op, std::string algorithm) {
    forced[std::move(op)] = std::move(algorithm);
    return *this;
  }
};

// The process-wide settings: what every thread without a guard uses. Initialised from
// EMBER_ALGO_MODE, EMBER_ALGO_WORKSPACE_LIMIT, EMBER_ALGO_FORCE ("conv2d=direct,lstm=fused") and
// adaptive mode's EMBER_ALGO_TOP_K, EMBER_ALGO_MAX_TIMED_KEYS, EMBER_ALGO_INITIAL_BUDGET_MS,
// EMBER_ALGO_STEP_BUDGET_MS, EMBER_ALGO_TIMING_SHARE and EMBER_ALGO_REFINE_RUNS.
AlgoSettings global_algo_settings();
void set_global_algo_settings(const AlgoSettings& settings);
// The settings in effect on the calling thread: its innermost guard's, else the global ones.
AlgoSettings current_algo_settings();

// RAII: `settings` apply to the calling thread for this scope (other threads are unaffected).
class AlgoSettingsGuard {
 public:
  explicit AlgoSettingsGuard(const AlgoSettings& settings);
  ~AlgoSettingsGuard();
  AlgoSettingsGuard(const AlgoSettingsGuard&) = delete;
  AlgoSettingsGuard& operator=(const AlgoSettingsGuard&) = delete;
};
// RAII shorthand: the current settings with only the mode changed.
class AlgoModeGuard {
 public:
  explicit AlgoModeGuard(AlgoMode mode);

 private:
  AlgoSettingsGuard guard_;
};

// ---- introspection ----------------------------------------------------------------------------

// How a cached choice was made.
enum class ChoiceSource : uint8_t {
  heuristic,  // rules; in benchmark mode a later miss-free call may still benchmark the key
  benchmark,  // timed (in this process or loaded from a cache file)
  nearest,    // copied from the nearest benchmarked key (dynamic-shape policy)
  borrowed,   // adaptive mode: copied from a timed key of the same size class; timed later
};
const char* choice_source_name(ChoiceSource s);

struct AlgoCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;      // lookups that had to choose (forced lookups excluded)
  uint64_t benchmarks = 0;  // keys benchmarked (each times every candidate)
  uint64_t candidates_timed = 0;
  uint64_t candidates_failed = 0;  // threw while benchmarked (out of memory included)
  uint64_t candidates_pruned = 0;  // timed once only: far slower than the fastest so far
  double benchmark_ms = 0;         // wall time spent benchmarking
  uint64_t heuristic_choices = 0;
  uint64_t nearest_reuses = 0;  // dynamic-shape policy: reused a benchmarked neighbour
  // Adaptive mode. Keys it timed are counted in benchmarks (and benchmark_ms) too.
  uint64_t borrowed = 0;                 // new keys given a timed class-mate's choice
  uint64_t retimed = 0;                  // borrowed or heuristic entries replaced by a timing
  uint64_t budget_fallbacks = 0;         // keys left untimed because a budget was spent
  uint64_t candidates_beyond_top_k = 0;  // usable candidates not timed (outside the top k)
  uint64_t capture_fallbacks = 0;        // benchmark-mode misses during stream capture
  uint64_t forced_choices = 0;
  uint64_t workspace_fallbacks = 0;  // workspace allocation failed: ran a zero-workspace algorithm
  uint64_t evictions = 0;
  uint64_t loaded_entries = 0;
  size_t entries = 0;  // now in the cache
};

struct CachedChoice {
  std::string algorithm;
  ChoiceSource source = ChoiceSource::heuristic;
  float time_ms = 0;  // measured time of the choice (benchmark source only)
};

// What a saved cache file is valid for. A file whose stamp differs is ignored with a warning.
struct AlgoCacheStamp {
  std::string ember_version;
  std::string gpu_name;  // device 0, or "none"
  int cc_major = 0, cc_minor = 0;
  int cuda_runtime_version = 0, cuda_driver_version = 0;
  std::string cpu_model;  // CPU timings are only valid on the CPU that measured them
  bool operator==(const AlgoCacheStamp&) const = default;
};
AlgoCacheStamp current_algo_cache_stamp();

struct AlgoCacheLoadResult {
  bool loaded = false;  // the file was read and its stamp matched
  size_t entries = 0;   // entries added
  size_t skipped = 0;   // entries whose op or algorithm this process does not have
  std::string warning;  // why the file (or some entries) was ignored; also printed to stderr
};

// ---- the cache --------------------------------------------------------------------------------

namespace detail {
// A Problem with its type erased, so the cache's logic lives in one .cpp for every op.
struct ErasedProblem {
  const void* problem;
  Device device;
  const std::type_info* type;
  bool (*applies)(const void* algorithm, const void* problem);
  size_t (*workspace_bytes)(const void* algorithm, const void* problem);
  bool (*has_heuristic_cost)(const void* algorithm);
  double (*heuristic_cost)(const void* algorithm, const void* problem);
  void (*run)(const void* algorithm, const void* problem, void* workspace);
  std::shared_ptr<void> (*make_scratch)(const void* problem);
};

template <typename P>
ErasedProblem erase_problem(const P& p) {
  using A = Algorithm<P>;
  return ErasedProblem{
      &p,
      p.device(),
      &typeid(P),
      [](const void* a, const void* q) {
        const A& algo = *static_cast<const A*>(a);
        return !algo.applies || algo.applies(*static_cast<const P*>(q));
      },
      [](const void* a, const void* q) -> size_t {
        const A& algo = *static_cast<const A*>(a);
        return algo.workspace_bytes ? algo.workspace_bytes(*static_cast<const P*>(q)) : 0;
      },
      [](const void* a) { return bool(static_cast<const A*>(a)->heuristic_cost); },
      [](const void* a, const void* q) {
        return static_cast<const A*>(a)->heuristic_cost(*static_cast<const P*>(q));
      },
      [](const void* a, const void* q, void* ws) {
        static_cast<const A*>(a)->run(*static_cast<const P*>(q), ws);
      },
      [](const void* q) -> std::shared_ptr<void> {
        return std::make_shared<P>(static_cast<const P*>(q)->with_scratch_outputs());
      },
  };
}
}  // namespace detail

class AlgoCache {
 public:
  static constexpr size_t kDefaultCapacity = 4096;
  static constexpr int kDefaultMaxBenchmarkedKeysPerOp = 64;

  explicit AlgoCache(size_t capacity = kDefaultCapacity);
  ~AlgoCache();
  AlgoCache(const AlgoCache&) = delete;
  AlgoCache& operator=(const AlgoCache&) = delete;

  // The algorithm for `problem`, described by `key` (op, direction and device type must match
  // the slot; deterministic and workspace_bucket are filled from the current settings).
  // Throws not_supported when no registered algorithm applies. A key flagged oversize (a size of
  // 2^31 or more, a spatial parameter beyond 16 bits) is decided by the heuristic on every call
  // and never cached, timed or saved.
  template <typename Problem>
  const Algorithm<Problem>& choose(const AlgoSlot& slot, const AlgoKey& key,
                                   const Problem& problem) {
    int i = select(slot, key, detail::erase_problem(problem)).index;  // checks the Problem type
    return *static_cast<const Algorithm<Problem>*>(slot.algorithm_ptr(i));
  }
  // Chooses, allocates the workspace on problem.device() and runs. If that allocation fails, a
  // zero-workspace algorithm runs instead (the choice stays cached).
  template <typename Problem>
  void run(const AlgoSlot& slot, const AlgoKey& key, const Problem& problem) {
    run_erased(slot, key, detail::erase_problem(problem));
  }

  // The cached choice for `key` under the calling thread's settings, without choosing.
  std::optional<CachedChoice> peek(const AlgoSlot& slot, const AlgoKey& key) const;

  AlgoCacheStats stats() const;
  void reset_stats();
  // Drops every entry and the dynamic-shape policy's per-op benchmark counts.
  void clear();
  size_t size() const;
  // LRU bound on entries; shrinking evicts at once. At least 1.
  void set_capacity(size_t entries);
  size_t capacity() const;
  // Dynamic-shape policy: distinct keys benchmarked per op.direction (and device type) before
  // new keys reuse the nearest benchmarked key's choice. 0 disables benchmarking outright.
  void set_max_benchmarked_keys_per_op(int n);
  int max_benchmarked_keys_per_op() const;

  // Adaptive mode, at a step boundary (a training loop calls it after each step; never needed):
  // grants the steady pool a step's budget (AdaptiveSettings::step_budget_ms of the calling
  // thread's settings), so that the entries still borrowed or chosen by the heuristic are timed
  // at their next lookup (outside any CUDA graph capture). Timing needs the op's operands, which
  // exist only during its call, so nothing is timed here. Returns the number of such entries.
  size_t tune_pending();

  // Writes the benchmarked entries as JSON, atomically (temp file in the same folder, fsync,
  // rename). Throws Error(execution_failed) naming the file when it cannot be written.
  void save(const std::string& path) const;
  // Adds the entries of a file saved by save(). Never throws for a bad file: a missing, corrupt,
  // truncated or foreign (other GPU, versions or CPU) file is ignored with a warning.
  AlgoCacheLoadResult load(const std::string& path);
  // True when benchmarked entries were added since the last save or load.
  bool dirty() const;

  struct Impl;

 private:
  // The chosen algorithm and, when choosing computed it (workspace limit checks, candidates of a
  // miss, forced choices), its workspace size, so that run() never computes it twice. Two words,
  // returned in registers (an std::optional member made it a 24-byte struct returned through
  // memory, and reading it back stalled on store forwarding).
  static constexpr size_t kWorkspaceNotComputed = std::numeric_limits<size_t>::max();
  struct Selection {
    int index;
    size_t workspace_bytes = kWorkspaceNotComputed;
  };
  Selection select(const AlgoSlot& slot, const AlgoKey& key, const detail::ErasedProblem& problem);
  void run_erased(const AlgoSlot& slot, const AlgoKey& key, const detail::ErasedProblem& problem);
  std::unique_ptr<Impl> impl_;
};

// The process-wide cache every op uses. On first use it loads the file named by EMBER_ALGO_CACHE
// (if set) and arranges to save back to it at exit (when anything new was benchmarked).
AlgoCache& algo_cache();
// What EMBER_ALGO_CACHE does, from code: loads `path` into algo_cache() now and saves back to it
// at exit (atomically, only when something new was benchmarked; a failed save is a warning).
AlgoCacheLoadResult persist_algo_cache_to(const std::string& path);

// True when the current stream of `device` is capturing a CUDA graph (false on the CPU and in
// builds without CUDA). The cache never benchmarks while this holds.
bool current_stream_is_capturing(Device device);
// Tests: while on, current_stream_is_capturing() answers true for every device (the CPU too), so
// the cache's behaviour during a capture can be checked without a GPU.
void set_fake_capture_for_testing(bool on);

// EMBER_LOG_ALGOS=1: every decision (op, key, candidates with times and workspace, the choice)
// is written as one line to stderr, or to the sink when one is set (null restores stderr).
bool algo_log_enabled();
void set_algo_log_enabled(bool enabled);
void set_algo_log_sink(std::function<void(const std::string& line)> sink);

}  // namespace ember::dispatch
