// The AlgoCache's decisions: settings (global and per-thread guards), the lookup hot path, the
// miss path (heuristic, benchmark with scratch outputs, dynamic-shape policy, capture fallback,
// forced choices), running with a workspace, LRU eviction, statistics and the decision log.
// Persistence lives in algo_cache_io.cpp.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <sstream>
#include <vector>

#include "ember/dispatch/algo_cache_impl.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/eager_replay.h"
#include "ember/tensor/runtime/stream.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ember/cuda_kernels/common/stream_hold.h"
#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember::dispatch {

// ---- names ------------------------------------------------------------------------------------

const char* algo_mode_name(AlgoMode m) {
  switch (m) {
    case AlgoMode::heuristic:
      return "heuristic";
    case AlgoMode::benchmark:
      return "benchmark";
    case AlgoMode::deterministic:
      return "deterministic";
  }
  return "?";
}

AlgoMode algo_mode_from_name(std::string_view name) {
  for (AlgoMode m : {AlgoMode::heuristic, AlgoMode::benchmark, AlgoMode::deterministic})
    if (name == algo_mode_name(m)) return m;
  EMBER_THROW(bad_param, "unknown algorithm mode '", name,
              "'; expected heuristic, benchmark or deterministic");
}

const char* choice_source_name(ChoiceSource s) {
  switch (s) {
    case ChoiceSource::heuristic:
      return "heuristic";
    case ChoiceSource::benchmark:
      return "benchmark";
    case ChoiceSource::nearest:
      return "nearest";
  }
  return "?";
}

// ---- logging ----------------------------------------------------------------------------------

namespace {
struct LogState {
  std::atomic<bool> enabled{false};
  std::mutex mutex;
  std::function<void(const std::string&)> sink;
  LogState() {
    const char* env = std::getenv("EMBER_LOG_ALGOS");
    enabled = env && *env && std::string(env) != "0";
  }
};
LogState& log_state() {
  static LogState* state = new LogState();  // leaked: logging may happen during exit
  return *state;
}
}  // namespace

bool algo_log_enabled() { return log_state().enabled.load(std::memory_order_relaxed); }
void set_algo_log_enabled(bool enabled) { log_state().enabled = enabled; }
void set_algo_log_sink(std::function<void(const std::string&)> sink) {
  LogState& s = log_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.sink = std::move(sink);
}

void algo_log(const std::string& line) {
  LogState& s = log_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sink) {
    s.sink(line);
  } else {
    std::string out = "[ember algo] " + line + "\n";
    std::fputs(out.c_str(), stderr);
  }
}

void algo_warn(const std::string& message) {
  std::string out = "[ember algo] warning: " + message + "\n";
  std::fputs(out.c_str(), stderr);
}

namespace {
std::string format_bytes(size_t bytes) {
  if (bytes == kNoWorkspaceLimit) return "unlimited";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}
}  // namespace

// ---- settings ---------------------------------------------------------------------------------

namespace {
struct ResolvedSettings {
  AlgoSettings settings;
  uint8_t bucket = 255;
  ResolvedSettings() = default;
  explicit ResolvedSettings(const AlgoSettings& s)
      : settings(s), bucket(workspace_bucket(s.workspace_limit_bytes)) {}
};

AlgoSettings settings_from_environment() {
  AlgoSettings s;
  if (const char* mode = std::getenv("EMBER_ALGO_MODE"); mode && *mode) {
    try {
      s.mode = algo_mode_from_name(mode);
    } catch (const Error& e) {
      algo_warn(std::string("EMBER_ALGO_MODE ignored: ") + e.message());
    }
  }
  if (const char* limit = std::getenv("EMBER_ALGO_WORKSPACE_LIMIT"); limit && *limit) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(limit, &end, 10);
    if (end && *end == '\0')
      s.workspace_limit_bytes = size_t(v);
    else
      algo_warn(std::string("EMBER_ALGO_WORKSPACE_LIMIT='") + limit +
                "' ignored: expected a number of bytes");
  }
  if (const char* force = std::getenv("EMBER_ALGO_FORCE"); force && *force) {
    std::stringstream items(force);
    std::string item;
    while (std::getline(items, item, ',')) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        algo_warn("EMBER_ALGO_FORCE item '" + item +
                  "' ignored: expected op=algorithm or op.direction=algorithm");
        continue;
      }
      s.force(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  return s;
}

struct GlobalSettings {
  std::mutex mutex;
  AlgoSettings settings = settings_from_environment();
  // Bumped on every change; threads keep a copy and re-read only when it moved, so the hot path
  // reads one shared, rarely written counter instead of taking a lock.
  std::atomic<uint64_t> version{1};
};
GlobalSettings& global_settings() {
  static GlobalSettings* g = new GlobalSettings();  // leaked: used until the very end
  return *g;
}

// One hit a thread remembers: the filed key and its cached choice, valid for the cache `cache_id`
// while that cache's epoch is still `epoch` (any change of the cache makes it stale).
struct RememberedHit {
  AlgoKey key;  // as filed: the settings bytes in place
  uint64_t hash = 0;
  uint64_t cache_id = 0;  // 0: empty (cache ids start at 1)
  uint64_t epoch = 0;
  int algorithm = -1;
  ChoiceSource source = ChoiceSource::heuristic;
};

// The hits one thread remembers, a 4-way set-associative table by key hash, and the thread's hit
// counters of the caches it used last. A hit found here reads two shared words that only misses
// write (the cache's id and epoch are on read-mostly lines) and writes nothing shared, so threads
// never contend on a hit.
struct ThreadLookups {
  // 256 keys: a ResNet-50 step's conv keys several times over. 4 ways, because with 2 a set that
  // 3 keys in use fall into misses every time (64 keys in 128 sets of 2 missed 1 lookup in 10).
  static constexpr size_t kSets = 64;
  static constexpr uint8_t kWays = 4;
  struct Set {
    std::array<RememberedHit, kWays> ways;
    uint8_t victim = 0;  // the way to replace next, in turn (a hit writes nothing)
  };
  std::array<Set, kSets> sets;
  // This thread's hit counters of the last few caches it used, most recent first (a few, so that
  // alternating between two caches does not take the registration mutex on every hit). A counter
  // is used only while its cache runs a lookup, so it is alive then; ids are never reused.
  struct CounterRef {
    uint64_t cache_id = 0;
    ThreadHitCounter* counter = nullptr;
  };
  std::array<CounterRef, 4> counters{};

  const RememberedHit* find(uint64_t cache_id, uint64_t epoch, uint64_t hash,
                            const SettingsKey& key) const {
    const Set& set = sets[hash % kSets];
    for (const RememberedHit& r : set.ways)
      if (r.hash == hash && r.epoch == epoch && r.cache_id == cache_id && key.equals(r.key))
        return &r;
    return nullptr;
  }

  // Remembers a hit found in the shards (epoch read before that lookup), replacing a stale copy of
  // the same key when there is one, else the ways in turn.
  void remember(uint64_t cache_id, uint64_t epoch, uint64_t hash, const SettingsKey& key,
                int algorithm, ChoiceSource source) {
    Set& set = sets[hash % kSets];
    uint8_t w = set.victim;
    bool replacing_stale_copy = false;
    for (uint8_t i = 0; i < kWays; ++i) {
      const RememberedHit& r = set.ways[i];
      if (r.hash == hash && r.cache_id == cache_id && key.equals(r.key)) {
        w = i;
        replacing_stale_copy = true;
      }
    }
    RememberedHit& r = set.ways[w];
    r.key = key.copy();
    r.hash = hash;
    r.cache_id = cache_id;
    r.epoch = epoch;
    r.algorithm = algorithm;
    r.source = source;
    if (!replacing_stale_copy) set.victim = uint8_t((w + 1) % kWays);
  }

  void count_hit(AlgoCache::Impl& cache) {
    if (counters[0].cache_id != cache.id) [[unlikely]]
      bring_counter_to_front(cache);
    counters[0].counter->add_one();
  }

  [[gnu::noinline]] void bring_counter_to_front(AlgoCache::Impl& cache) {
    size_t at = counters.size() - 1;  // when not found, the least recent one drops out
    CounterRef found{};
    for (size_t i = 0; i < counters.size(); ++i)
      if (counters[i].cache_id == cache.id) {
        at = i;
        found = counters[i];
        break;
      }
    if (found.counter == nullptr) found = {cache.id, &cache.hit_counter_of_this_thread()};
    for (size_t i = at; i > 0; --i) counters[i] = counters[i - 1];
    counters[0] = found;
  }
};

struct ThreadSettings {
  uint64_t seen_version = 0;
  ResolvedSettings global;
  // Innermost last. A deque, so a reference to one stays valid while nested code (an algorithm
  // that dispatches through the cache) pushes another guard.
  std::deque<ResolvedSettings> guards;
  // Allocated on the first lookup (about 75 KB), only in threads that dispatch.
  std::unique_ptr<ThreadLookups> lookups;
};
// A trivially initialised thread_local pointer with the initial-exec model: reading it is one
// instruction, where a thread_local object of a shared library costs a __tls_get_addr call and an
// init guard on every lookup. The object is created on first use and freed when the thread exits.
[[gnu::tls_model("initial-exec")]] thread_local ThreadSettings* t_settings_ptr = nullptr;

ThreadSettings& make_thread_settings() {
  struct Owner {
    ThreadSettings settings;
    ~Owner() { t_settings_ptr = nullptr; }
  };
  thread_local Owner owner;
  t_settings_ptr = &owner.settings;
  return owner.settings;
}

inline ThreadSettings& thread_state() {
  ThreadSettings* t = t_settings_ptr;
  return t ? *t : make_thread_settings();
}

[[gnu::noinline]] void refresh_global_settings(ThreadSettings& t, GlobalSettings& g) {
  std::lock_guard<std::mutex> lock(g.mutex);
  t.global = ResolvedSettings(g.settings);
  t.seen_version = g.version.load(std::memory_order_relaxed);
}

[[gnu::always_inline]] inline const ResolvedSettings& resolved_settings(ThreadSettings& t) {
  if (!t.guards.empty()) return t.guards.back();
  GlobalSettings& g = global_settings();
  if (g.version.load(std::memory_order_acquire) != t.seen_version) [[unlikely]]
    refresh_global_settings(t, g);
  return t.global;
}

const ResolvedSettings& thread_settings() { return resolved_settings(thread_state()); }

ThreadLookups& thread_lookups(ThreadSettings& t) {
  if (!t.lookups) [[unlikely]]
    t.lookups = std::make_unique<ThreadLookups>();
  return *t.lookups;
}
}  // namespace

AlgoSettings global_algo_settings() {
  GlobalSettings& g = global_settings();
  std::lock_guard<std::mutex> lock(g.mutex);
  return g.settings;
}

void set_global_algo_settings(const AlgoSettings& settings) {
  GlobalSettings& g = global_settings();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.settings = settings;
  g.version.fetch_add(1, std::memory_order_release);
}

AlgoSettings current_algo_settings() { return thread_settings().settings; }

AlgoSettingsGuard::AlgoSettingsGuard(const AlgoSettings& settings) {
  thread_state().guards.emplace_back(settings);
}
AlgoSettingsGuard::~AlgoSettingsGuard() { thread_state().guards.pop_back(); }

AlgoModeGuard::AlgoModeGuard(AlgoMode mode)
    : guard_(AlgoSettings(current_algo_settings()).with_mode(mode)) {}

// ---- capture detection ------------------------------------------------------------------------

bool current_stream_is_capturing(Device device) {
#ifdef EMBER_WITH_CUDA
  if (!device.is_cuda()) return false;
  auto stream = static_cast<cudaStream_t>(current_stream(device).handle);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
#else
  (void)device;
  return false;
#endif
}

// ---- storage ----------------------------------------------------------------------------------

namespace {
uint64_t next_cache_id() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

AlgoCache::Impl::Impl() : id(next_cache_id()) {}

AlgoCache::AlgoCache(size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = std::max<size_t>(capacity, 1);
}
AlgoCache::~AlgoCache() = default;

ThreadHitCounter& AlgoCache::Impl::hit_counter_of_this_thread() {
  std::lock_guard<std::mutex> lock(hit_counters_mutex);
  const std::thread::id me = std::this_thread::get_id();
  for (auto& [thread, counter] : hit_counters)
    if (thread == me) return *counter;
  hit_counters.emplace_back(me, std::make_unique<ThreadHitCounter>());
  return *hit_counters.back().second;
}

uint64_t AlgoCache::Impl::total_hits() {
  std::lock_guard<std::mutex> lock(hit_counters_mutex);
  uint64_t sum = 0;
  for (const auto& entry : hit_counters) sum += entry.second->hits.load(std::memory_order_relaxed);
  return sum;
}

void AlgoCache::Impl::insert(const AlgoKey& key, uint64_t hash, int algorithm, ChoiceSource source,
                             float time_ms, bool from_file) {
  bool added = false;
  {
    CacheShard& shard = shard_of(hash);
    std::unique_lock<SharedSpinLock> lock(shard.mutex);
    auto [it, inserted] = shard.map.try_emplace(StoredKey{key, hash});
    CacheEntry& e = it->second;
    e.algorithm = int16_t(algorithm);
    e.source = source;
    e.time_ms = time_ms;
    e.last_used.store(epoch.fetch_add(1, std::memory_order_release) + 1, std::memory_order_relaxed);
    added = inserted;
  }
  if (source == ChoiceSource::benchmark && !from_file) dirty = true;
  if (added && entries.fetch_add(1, std::memory_order_relaxed) + 1 > capacity.load())
    evict_to_capacity();
}

void AlgoCache::Impl::evict_to_capacity() {
  std::lock_guard<std::mutex> evict_lock(evict_mutex);
  while (entries.load() > capacity.load()) {
    // Find the least recently used entry, one shard at a time (never two shard locks at once).
    int victim_shard = -1;
    StoredKey victim;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (int s = 0; s < kNumShards; ++s) {
      std::shared_lock<SharedSpinLock> lock(shards[s].mutex);
      for (const auto& [k, e] : shards[s].map) {
        uint64_t t = e.last_used.load(std::memory_order_relaxed);
        if (t < oldest) {
          oldest = t;
          victim = k;
          victim_shard = s;
        }
      }
    }
    if (victim_shard < 0) return;
    CacheShard& shard = shards[victim_shard];
    std::unique_lock<SharedSpinLock> lock(shard.mutex);
    auto it = shard.map.find(victim);
    if (it != shard.map.end()) {
      shard.erase(it);
      epoch.fetch_add(1, std::memory_order_release);
      entries.fetch_sub(1, std::memory_order_relaxed);
      evictions.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void AlgoCache::Impl::remember_benchmarked(int slot_index, const AlgoKey& key, int algorithm) {
  std::lock_guard<std::mutex> lock(policy_mutex);
  auto& list = benchmarked_keys[slot_index];
  for (BenchmarkedKey& b : list)
    if (b.key == key) {
      b.algorithm = algorithm;
      return;
    }
  list.push_back({key, algorithm});
}

size_t AlgoCache::size() const { return impl_->entries.load(); }
size_t AlgoCache::capacity() const { return impl_->capacity.load(); }
void AlgoCache::set_capacity(size_t entries) {
  impl_->capacity = std::max<size_t>(entries, 1);
  impl_->evict_to_capacity();
}
void AlgoCache::set_max_benchmarked_keys_per_op(int n) {
  EMBER_CHECK(n >= 0, "AlgoCache::set_max_benchmarked_keys_per_op: n must be >= 0, got ", n);
  impl_->max_benchmarked_keys = n;
}
int AlgoCache::max_benchmarked_keys_per_op() const { return impl_->max_benchmarked_keys.load(); }
bool AlgoCache::dirty() const { return impl_->dirty.load(); }

void AlgoCache::clear() {
  std::lock_guard<std::recursive_mutex> bench_lock(impl_->benchmark_mutex);
  for (CacheShard& shard : impl_->shards) {
    std::unique_lock<SharedSpinLock> lock(shard.mutex);
    impl_->entries.fetch_sub(shard.map.size());
    shard.clear();
    impl_->epoch.fetch_add(1, std::memory_order_release);
  }
  std::lock_guard<std::mutex> lock(impl_->policy_mutex);
  impl_->benchmarked_keys.clear();
  for (auto& c : impl_->benchmarked_count) c = 0;
}

AlgoCacheStats AlgoCache::stats() const {
  Impl& m = *impl_;
  AlgoCacheStats s;
  s.hits = m.total_hits() - m.hits_at_reset.load();
  s.misses = m.misses;
  s.benchmarks = m.benchmarks;
  s.candidates_timed = m.candidates_timed;
  s.candidates_failed = m.candidates_failed;
  s.candidates_pruned = m.candidates_pruned;
  s.benchmark_ms = double(m.benchmark_ns.load()) / 1e6;
  s.heuristic_choices = m.heuristic_choices;
  s.nearest_reuses = m.nearest_reuses;
  s.capture_fallbacks = m.capture_fallbacks;
  s.forced_choices = m.forced_choices;
  s.workspace_fallbacks = m.workspace_fallbacks;
  s.evictions = m.evictions;
  s.loaded_entries = m.loaded_entries;
  s.entries = m.entries;
  return s;
}

void AlgoCache::reset_stats() {
  Impl& m = *impl_;
  m.hits_at_reset = m.total_hits();
  for (auto* c :
       {&m.misses, &m.benchmarks, &m.candidates_timed, &m.candidates_failed, &m.candidates_pruned,
        &m.benchmark_ns, &m.heuristic_choices, &m.nearest_reuses, &m.capture_fallbacks,
        &m.forced_choices, &m.workspace_fallbacks, &m.evictions, &m.loaded_entries})
    c->store(0);
}

// ---- decisions --------------------------------------------------------------------------------

namespace {

// One algorithm of the slot, as seen for one problem.
struct Candidate {
  int index;
  size_t workspace_bytes;
  double time_ms = -1;  // benchmark result; < 0 when not timed or failed
  std::string failure;  // why the benchmark run threw
  bool pruned = false;  // timed once only: already far slower than the fastest so far
};
struct CandidateSet {
  std::vector<Candidate> usable;
  std::vector<std::string> skipped;  // "name (reason)"
};

CandidateSet gather_candidates(const AlgoSlot& slot, const detail::ErasedProblem& p,
                               bool deterministic_only, size_t workspace_limit) {
  CandidateSet set;
  int n = slot.size();
  for (int i = 0; i < n; ++i) {
    if (!slot.enabled(i)) continue;
    const std::string& name = slot.algorithm_name(i);
    const void* algo = slot.algorithm_ptr(i);
    if (deterministic_only && !slot.algorithm_deterministic(i)) {
      set.skipped.push_back(name + " (not deterministic)");
      continue;
    }
    if (!p.applies(algo, p.problem)) {
      set.skipped.push_back(name + " (does not apply)");
      continue;
    }
    size_t ws = p.workspace_bytes(algo, p.problem);
    if (ws > workspace_limit) {
      set.skipped.push_back(name + " (workspace " + format_bytes(ws) + " > limit " +
                            format_bytes(workspace_limit) + ")");
      continue;
    }
    set.usable.push_back(Candidate{i, ws, -1, {}});
  }
  return set;
}

// The heuristic: the lowest heuristic_cost; algorithms without an estimate rank after those with
// one, in registration order.
const Candidate& heuristic_pick(const AlgoSlot& slot, const detail::ErasedProblem& p,
                                const std::vector<Candidate>& usable) {
  const Candidate* best = nullptr;
  double best_cost = 0;
  bool best_has_cost = false;
  for (const Candidate& c : usable) {
    const void* algo = slot.algorithm_ptr(c.index);
    bool has_cost = p.has_heuristic_cost(algo);
    double cost = has_cost ? p.heuristic_cost(algo, p.problem) : 0;
    bool better = !best || (has_cost && !best_has_cost) ||
                  (has_cost == best_has_cost && has_cost && cost < best_cost);
    if (better) {
      best = &c;
      best_cost = cost;
      best_has_cost = has_cost;
    }
  }
  return *best;
}

std::string describe_candidates(const AlgoSlot& slot, const std::vector<Candidate>& usable,
                                const std::vector<std::string>& skipped) {
  std::ostringstream os;
  for (size_t i = 0; i < usable.size(); ++i) {
    const Candidate& c = usable[i];
    os << (i ? " | " : "") << slot.algorithm_name(c.index);
    if (c.time_ms >= 0) {
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %.4f ms%s", c.time_ms,
                    c.pruned ? " (pruned after one run)" : "");
      os << buf;
    } else if (!c.failure.empty()) {
      os << " failed: " << c.failure;
    }
    os << " ws=" << format_bytes(c.workspace_bytes);
  }
  for (const std::string& s : skipped) os << " | skipped " << s;
  return os.str();
}

void log_decision(const AlgoSlot& slot, const AlgoKey& key, const char* how,
                  const std::vector<Candidate>& usable, const std::vector<std::string>& skipped,
                  const std::string& choice) {
  algo_log(slot.name() + " " + key.to_string() + " | " + how + ": " +
           describe_candidates(slot, usable, skipped) + " -> " + choice);
}

[[noreturn]] void throw_no_candidate(const AlgoSlot& slot, const AlgoKey& key,
                                     const CandidateSet& set, size_t limit) {
  const char* device = device_type_name(slot.device_type());
  if (slot.names().empty())
    EMBER_THROW(not_supported, slot.name(), ": no algorithm is registered for ", device,
                (slot.device_type() == DeviceType::CUDA && !cuda::built_with_cuda()
                     ? " (this build of Ember has no CUDA backend)"
                     : "; run it on another device"));
  std::ostringstream why;
  for (size_t i = 0; i < set.skipped.size(); ++i) why << (i ? ", " : "") << set.skipped[i];
  EMBER_THROW(not_supported, slot.name(), " on ", device, ": no registered algorithm can run ",
              key.to_string(), "; candidates: ", why.str(),
              (limit != kNoWorkspaceLimit ? ". Raise the workspace limit or leave deterministic "
                                            "mode if that is what excludes them"
                                          : ""));
}

// Times one candidate on the scratch problem: one warm-up run, then up to `reps` timed runs.
// CPU: steady_clock per run, minimum. CUDA: events on the current stream around `reps` runs, mean,
// enqueued behind a hold kernel (cuda_kernels/common/stream_hold.h) long enough for the host to enqueue
// them all, so the runs go back to back and the events time the GPU alone: the steady state of a
// captured step, where host launch overhead is gone. (Timed at the host's pace, a 10-us problem
// ranked the single-kernel algorithms above faster ones of two kernels.)
// Pruning: when the warm-up run alone took longer than `prune_above_ms` (a multiple of the fastest
// candidate so far), the candidate cannot win: its warm-up time is returned and `c.pruned` set.
// That keeps a slow algorithm (a direct or FFT convolution on a large layer) from costing four
// runs per new shape on the first step.
double time_candidate(const AlgoSlot& slot, const detail::ErasedProblem& p, const void* scratch,
                      Candidate& c, int reps,
                      double prune_above_ms = std::numeric_limits<double>::infinity()) {
  constexpr double kCpuBudgetMs = 200;  // stop repeating a slow CPU candidate early
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
  // prunes at once: running such candidates twice doubled the first step's benchmarking
  // (ResNet-50 bf16 at batch 256 on the H200: 30.3 s against 15.6 s with one warm-up).
  constexpr int kPruneWarmups = 2;
  const double hopeless_ms = std::max(10 * prune_above_ms, prune_above_ms + 5.0);
  const bool may_prune = prune_above_ms < std::numeric_limits<double>::infinity();
  if (p.device.is_cuda()) {
    Stream stream = current_stream(p.device);
    Event warm_start(true), start(true), end(true);
    // Holds the stream while the host enqueues `runs` runs behind it: a few microseconds per
    // launch, so 50 us per run covers algorithms of a few launches (one whose enqueueing takes
    // longer is partly timed at the host's pace, as without the hold).
    auto hold_for = [&](int runs) {
#ifdef EMBER_WITH_CUDA
      cuda::hold_stream(static_cast<cudaStream_t>(stream.handle), 20.0 + 50.0 * runs);
#else
      (void)runs;
#endif
    };
    // A run that eager replay (tensor/runtime/eager_replay.h) recorded or captured paid one-time host
    // work and is no warm-up: it runs again (twice at most: recorded, then captured), so the
    // warm-ups and the timed runs replay, as the op does in steady state.
    int replay_setup_runs = 0;
    for (int w = 0; w < (may_prune ? kPruneWarmups : 1); ++w) {
      if (may_prune) hold_for(1);  // a warm-up that may prune is timed on the GPU alone too
      const int64_t setup_events = cuda::eager_replay_setup_events();
      warm_start.record(stream);
      p.run(algo, scratch, workspace.ptr);  // warm-up (and the first failure, if any)
      start.record(stream);
      if (cuda::eager_replay_setup_events() != setup_events && replay_setup_runs < 2) {
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
  for (int w = 0; w < kPruneWarmups; ++w) {
    auto t0 = clock::now();
    p.run(algo, scratch, workspace.ptr);
    const double warm_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    spent += warm_ms;
    if (warm_ms <= prune_above_ms) break;
    if (w + 1 == kPruneWarmups || warm_ms > hopeless_ms) {
      c.pruned = true;
      return warm_ms;
    }
  }
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps && (r == 0 || spent < kCpuBudgetMs); ++r) {
    auto t = clock::now();
    p.run(algo, scratch, workspace.ptr);
    double ms = std::chrono::duration<double, std::milli>(clock::now() - t).count();
    best = std::min(best, ms);
    spent += ms;
  }
  return best;
}

std::string first_line(const char* what) {
  std::string s(what);
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

// ---- SettingsKey (algo_cache_impl.h) ------------------------------------------------------------

AlgoKey SettingsKey::copy() const {
  AlgoKey k = *key_;
  std::memcpy(reinterpret_cast<unsigned char*>(&k) + 8, &word1_, 8);
  return k;
}

AlgoCache::Selection AlgoCache::select(const AlgoSlot& slot, const AlgoKey& key_in,
                                       const detail::ErasedProblem& p) {
  Impl& m = *impl_;
  ThreadSettings& thread = thread_state();
  const ResolvedSettings& rs = resolved_settings(thread);
  const AlgoSettings& settings = rs.settings;
  if (slot.size() == 0) [[unlikely]]
    throw_no_candidate(slot, key_in, {}, settings.workspace_limit_bytes);
  slot.check_problem_type(*p.type);
  const size_t limit = settings.workspace_limit_bytes;
  const AlgoMode mode = settings.mode;

  // ---- forced: the user's choice, validated, never cached ----
  if (!settings.forced.empty()) [[unlikely]] {
    auto it = settings.forced.find(std::string_view(slot.name()));
    if (it == settings.forced.end())
      it = settings.forced.find(std::string_view(slot.name()).substr(0, slot.name().rfind('.')));
    if (it != settings.forced.end()) {
      const std::string& name = it->second;
      const char* device = device_type_name(slot.device_type());
      int i = slot.find(name);
      if (i < 0) {
        std::ostringstream known;
        for (const std::string& n : slot.names()) known << (known.tellp() > 0 ? ", " : "") << n;
        EMBER_THROW(bad_param, slot.name(), ": the forced algorithm '", name,
                    "' is not registered for ", device, "; registered: ", known.str(),
                    ". Fix AlgoSettings::forced (or EMBER_ALGO_FORCE)");
      }
      const void* algo = slot.algorithm_ptr(i);
      if (!p.applies(algo, p.problem)) {
        CandidateSet set =
            gather_candidates(slot, p, mode == AlgoMode::deterministic, kNoWorkspaceLimit);
        std::ostringstream ok;
        for (const Candidate& c : set.usable)
          ok << (ok.tellp() > 0 ? ", " : "") << slot.algorithm_name(c.index);
        EMBER_THROW(bad_param, slot.name(), ": the forced algorithm '", name,
                    "' does not apply to ", key_in.to_string(),
                    "; algorithms that apply: ", ok.str(),
                    ". Force one of those or remove the forced entry");
      }
      EMBER_CHECK(mode != AlgoMode::deterministic || slot.algorithm_deterministic(i), slot.name(),
                  ": the forced algorithm '", name,
                  "' is not deterministic but the mode is deterministic; force a deterministic "
                  "algorithm or leave deterministic mode");
      size_t ws = p.workspace_bytes(algo, p.problem);
      EMBER_CHECK(ws <= limit, slot.name(), ": the forced algorithm '", name, "' needs ",
                  format_bytes(ws), " of workspace, over the limit of ", format_bytes(limit),
                  "; raise the limit or force another algorithm");
      m.forced_choices.fetch_add(1, std::memory_order_relaxed);
      return {i, ws};
    }
  }

  // ---- the hot path: the thread's remembered hits, else a shared-locked lookup in one shard ----
  const SettingsKey filed(key_in, mode == AlgoMode::deterministic, rs.bucket);
  const uint64_t hash = filed.hash();
  // Read before the shard lookup, so that a hit remembered from it is stale after any change that
  // lookup may have missed.
  const uint64_t epoch = m.epoch.load(std::memory_order_acquire);
  ThreadLookups& lookups = thread_lookups(thread);
  CacheShard& shard = m.shard_of(hash);
  int cached = -1;
  ChoiceSource cached_source = ChoiceSource::heuristic;
  if (key_in.oversize) [[unlikely]] {
    // Its values overflowed the key's fields, so it names no single problem: never filed, never
    // looked up (the miss path below chooses for this call alone).
  } else if (const RememberedHit* r = lookups.find(m.id, epoch, hash, filed)) [[likely]] {
    cached = r->algorithm;
    cached_source = r->source;
  } else {
    std::shared_lock<SharedSpinLock> lock(shard.mutex);
    std::atomic<CacheShard::Node*>& front = shard.front_slot(hash);
    CacheShard::Node* node = front.load(std::memory_order_relaxed);
    if (node == nullptr || node->first.hash != hash || !filed.equals(node->first.key)) {
      auto it = shard.map.find(SettingsKeyRef{&filed, hash});
      node = it == shard.map.end() ? nullptr : &*it;
      if (node != nullptr) front.store(node, std::memory_order_relaxed);
    }
    if (node != nullptr) {
      CacheEntry& e = node->second;
      cached = e.algorithm;
      cached_source = e.source;
      uint64_t now = m.epoch.load(std::memory_order_relaxed);
      if (e.last_used.load(std::memory_order_relaxed) != now)
        e.last_used.store(now, std::memory_order_relaxed);
      lookups.remember(m.id, epoch, hash, filed, cached, cached_source);
    }
  }
  const int budget = m.max_benchmarked_keys.load(std::memory_order_relaxed);
  auto budget_left = [&] {
    return m.benchmarked_count[slot.index()].load(std::memory_order_relaxed) < uint32_t(budget);
  };
  bool over_limit = false;
  if (cached >= 0 && slot.enabled(cached)) [[likely]] {
    size_t workspace = kWorkspaceNotComputed;
    if (limit != kNoWorkspaceLimit) {
      workspace = p.workspace_bytes(slot.algorithm_ptr(cached), p.problem);
      over_limit = workspace > limit;
    }
    bool wants_benchmark =
        mode == AlgoMode::benchmark && cached_source == ChoiceSource::heuristic && budget_left();
    if (!over_limit && !wants_benchmark) [[likely]] {
      lookups.count_hit(m);
      return {cached, workspace};
    }
  }

  // ---- the miss path ----
  m.misses.fetch_add(1, std::memory_order_relaxed);
  const AlgoKey key = filed.copy();
  EMBER_INTERNAL_ASSERT(key.hash() == hash, "SettingsKey::hash disagrees with AlgoKey::hash for ",
                        key.to_string());
  CandidateSet set = gather_candidates(slot, p, mode == AlgoMode::deterministic, limit);
  if (set.usable.empty()) throw_no_candidate(slot, key, set, limit);
  const bool logging = algo_log_enabled();
  // A choice with the workspace size gather_candidates computed for it (none when the algorithm
  // is not among the usable candidates).
  auto selection = [&](int index) -> Selection {
    for (const Candidate& c : set.usable)
      if (c.index == index) return {index, c.workspace_bytes};
    return {index, kWorkspaceNotComputed};
  };

  if (over_limit || key.oversize) {
    // Choose for this call only: the cached choice was made under a larger limit of the same
    // bucket (the entry stays for the calls that share its limit), or the key cannot be filed.
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    if (logging)
      log_decision(slot, key,
                   over_limit ? "heuristic (cached choice over the workspace limit)"
                              : "heuristic (sizes beyond the key's fields, not cached)",
                   set.usable, set.skipped, slot.algorithm_name(pick.index));
    return {pick.index, pick.workspace_bytes};
  }

  auto choose_heuristic = [&](const char* how) -> Selection {
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    m.insert(key, hash, pick.index, ChoiceSource::heuristic, 0);
    if (logging)
      log_decision(slot, key, how, set.usable, set.skipped, slot.algorithm_name(pick.index));
    return {pick.index, pick.workspace_bytes};
  };

  if (mode != AlgoMode::benchmark) return choose_heuristic(algo_mode_name(mode));

  if (current_stream_is_capturing(p.device)) {
    // Timing would synchronize inside a capture: use what is known, benchmark after the capture.
    m.capture_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (cached >= 0 && slot.enabled(cached)) {
      if (logging)
        log_decision(slot, key, "capturing, cached", set.usable, set.skipped,
                     slot.algorithm_name(cached));
      return selection(cached);
    }
    return choose_heuristic("capturing, heuristic");
  }

  std::lock_guard<std::recursive_mutex> bench_lock(m.benchmark_mutex);
  {
    // Another thread may have benchmarked this key while we waited for the lock.
    int benchmarked = -1;
    {
      std::shared_lock<SharedSpinLock> lock(shard.mutex);
      auto it = shard.map.find(KeyRef{&key, hash});
      if (it != shard.map.end() && it->second.source != ChoiceSource::heuristic &&
          slot.enabled(it->second.algorithm))
        benchmarked = it->second.algorithm;
    }
    if (benchmarked >= 0) return selection(benchmarked);
  }

  if (!budget_left()) {
    // Dynamic-shape policy: this op has benchmarked its quota of keys; reuse the choice of the
    // nearest benchmarked key when it applies here, else the heuristic. No timing.
    int nearest_algo = -1;
    double best = std::numeric_limits<double>::infinity();
    {
      std::lock_guard<std::mutex> lock(m.policy_mutex);
      auto it = m.benchmarked_keys.find(slot.index());
      if (it != m.benchmarked_keys.end())
        for (const BenchmarkedKey& b : it->second) {
          double d = size_distance(b.key, key);
          if (d < best) {
            best = d;
            nearest_algo = b.algorithm;
          }
        }
    }
    for (const Candidate& c : set.usable)
      if (nearest_algo >= 0 && c.index == nearest_algo) {
        m.nearest_reuses.fetch_add(1, std::memory_order_relaxed);
        m.insert(key, hash, c.index, ChoiceSource::nearest, 0);
        if (logging) {
          char how[96];
          std::snprintf(how, sizeof(how), "nearest benchmarked key (distance %.3f)", best);
          log_decision(slot, key, how, set.usable, set.skipped, slot.algorithm_name(c.index));
        }
        return {c.index, c.workspace_bytes};
      }
    return choose_heuristic(nearest_algo >= 0
                                ? "benchmark quota used, nearest choice does not apply: heuristic"
                                : "benchmark quota used, no comparable key: heuristic");
  }

  // ---- benchmark: every usable candidate on scratch outputs ----
  m.benchmarked_count[slot.index()].fetch_add(1, std::memory_order_relaxed);
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
  if (best != nullptr) {
    constexpr double kCloseRatio = 1.15;
    constexpr int kRefineReps = 10;
    const double cutoff = best->time_ms * kCloseRatio;
    std::vector<Candidate*> close;
    for (Candidate& c : set.usable)
      if (c.time_ms >= 0 && !c.pruned && c.time_ms <= cutoff) close.push_back(&c);
    if (close.size() > 1) {
      const Candidate* refined_best = nullptr;
      for (Candidate* c : close) {
        try {
          c->time_ms = time_candidate(slot, p, scratch.get(), *c, kRefineReps);
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

  if (!best) {
    // Nothing ran: cache nothing (a later call may succeed) and use the heuristic for this call.
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    if (logging)
      log_decision(slot, key, "benchmark failed for every candidate, heuristic", set.usable,
                   set.skipped, slot.algorithm_name(pick.index));
    return {pick.index, pick.workspace_bytes};
  }
  m.insert(key, hash, best->index, ChoiceSource::benchmark, float(best->time_ms));
  m.remember_benchmarked(slot.index(), key, best->index);
  if (logging)
    log_decision(slot, key, "benchmark", set.usable, set.skipped, slot.algorithm_name(best->index));
  return {best->index, best->workspace_bytes};
}

void AlgoCache::run_erased(const AlgoSlot& slot, const AlgoKey& key,
                           const detail::ErasedProblem& p) {
  const Selection chosen = select(slot, key, p);
  const int index = chosen.index;
  const void* algo = slot.algorithm_ptr(index);
  const size_t ws = chosen.workspace_bytes != kWorkspaceNotComputed
                        ? chosen.workspace_bytes
                        : p.workspace_bytes(algo, p.problem);
  DataPtr workspace{};
  if (ws > 0) {
    try {
      workspace = allocate(ws, p.device);
    } catch (const Error& e) {
      if (e.status() != Status::alloc_failed) throw;
      // Memory is short right now: run the best zero-workspace algorithm instead, for this call.
      bool deterministic_only = thread_settings().settings.mode == AlgoMode::deterministic;
      CandidateSet set = gather_candidates(slot, p, deterministic_only, 0);
      if (set.usable.empty()) throw;
      const Candidate& pick = heuristic_pick(slot, p, set.usable);
      impl_->workspace_fallbacks.fetch_add(1, std::memory_order_relaxed);
      if (algo_log_enabled())
        algo_log(slot.name() + " " + key.to_string() + " | workspace of " + format_bytes(ws) +
                 " for " + slot.algorithm_name(index) + " could not be allocated -> " +
                 slot.algorithm_name(pick.index));
      p.run(slot.algorithm_ptr(pick.index), p.problem, nullptr);
      return;
    }
  }
  struct FreeOnExit {
    DataPtr& d;
    ~FreeOnExit() {
      if (d.deleter) d.deleter(d.ptr);
    }
  } free_on_exit{workspace};
  p.run(algo, p.problem, workspace.ptr);
}

std::optional<CachedChoice> AlgoCache::peek(const AlgoSlot& slot, const AlgoKey& key_in) const {
  const ResolvedSettings& rs = thread_settings();
  AlgoKey key = key_in;
  key.deterministic = rs.settings.mode == AlgoMode::deterministic;
  key.workspace_bucket = rs.bucket;
  uint64_t hash = key.hash();
  const CacheShard& shard = impl_->shard_of(hash);
  std::shared_lock<SharedSpinLock> lock(shard.mutex);
  auto it = shard.map.find(KeyRef{&key, hash});
  if (it == shard.map.end() || !slot.enabled(it->second.algorithm)) return std::nullopt;
  return CachedChoice{slot.algorithm_name(it->second.algorithm), it->second.source,
                      it->second.time_ms};
}

}  // namespace ember::dispatch
