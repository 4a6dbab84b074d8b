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

#include "dispatch/algo_cache_impl.h"
#include "tensor/allocator.h"
#include "tensor/stream.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "tensor/cuda_check.h"
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

struct ThreadSettings {
  uint64_t seen_version = 0;
  ResolvedSettings global;
  // Innermost last. A deque, so a reference to one stays valid while nested code (an algorithm
  // that dispatches through the cache) pushes another guard.
  std::deque<ResolvedSettings> guards;
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

const ResolvedSettings& thread_settings() {
  ThreadSettings& t = thread_state();
  if (!t.guards.empty()) return t.guards.back();
  GlobalSettings& g = global_settings();
  if (g.version.load(std::memory_order_acquire) != t.seen_version) [[unlikely]] {
    std::lock_guard<std::mutex> lock(g.mutex);
    t.global = ResolvedSettings(g.settings);
    t.seen_version = g.version.load(std::memory_order_relaxed);
  }
  return t.global;
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

AlgoCache::AlgoCache(size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = std::max<size_t>(capacity, 1);
}
AlgoCache::~AlgoCache() = default;

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
    e.last_used.store(epoch.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
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
  }
  std::lock_guard<std::mutex> lock(impl_->policy_mutex);
  impl_->benchmarked_keys.clear();
  for (auto& c : impl_->benchmarked_count) c = 0;
}

AlgoCacheStats AlgoCache::stats() const {
  const Impl& m = *impl_;
  AlgoCacheStats s;
  for (const CacheShard& shard : m.shards) s.hits += shard.hits.load(std::memory_order_relaxed);
  s.misses = m.misses;
  s.benchmarks = m.benchmarks;
  s.candidates_timed = m.candidates_timed;
  s.candidates_failed = m.candidates_failed;
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
  for (CacheShard& shard : m.shards) shard.hits = 0;
  for (auto* c : {&m.misses, &m.benchmarks, &m.candidates_timed, &m.candidates_failed,
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
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %.4f ms", c.time_ms);
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
// CPU: steady_clock per run, minimum. CUDA: events on the current stream around `reps` runs, mean.
double time_candidate(const AlgoSlot& slot, const detail::ErasedProblem& p, const void* scratch,
                      const Candidate& c, int reps = 3) {
  const int kReps = reps;
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

  if (p.device.is_cuda()) {
    p.run(algo, scratch, workspace.ptr);  // warm-up (and the first failure, if any)
    Stream stream = current_stream(p.device);
    Event start(true), end(true);
    start.record(stream);
    for (int r = 0; r < kReps; ++r) p.run(algo, scratch, workspace.ptr);
    end.record(stream);
    end.synchronize();
    return double(start.elapsed_ms(end)) / kReps;
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  p.run(algo, scratch, workspace.ptr);
  double warm_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  double best = std::numeric_limits<double>::infinity(), spent = warm_ms;
  for (int r = 0; r < kReps && (r == 0 || spent < kCpuBudgetMs); ++r) {
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

namespace {
static_assert(std::endian::native == std::endian::little, "SettingsKey patches bytes by shifts");
static_assert(offsetof(AlgoKey, deterministic) / 8 == 1 &&
                  offsetof(AlgoKey, workspace_bucket) / 8 == 1,
              "SettingsKey patches the key's second 8-byte word");
constexpr int kDeterministicShift = int(8 * (offsetof(AlgoKey, deterministic) - 8));
constexpr int kWorkspaceBucketShift = int(8 * (offsetof(AlgoKey, workspace_bucket) - 8));
}  // namespace

SettingsKey::SettingsKey(const AlgoKey& key, uint8_t deterministic, uint8_t workspace_bucket)
    : key_(&key) {
  uint64_t w;
  std::memcpy(&w, reinterpret_cast<const unsigned char*>(&key) + 8, 8);
  w &= ~((uint64_t(0xFF) << kDeterministicShift) | (uint64_t(0xFF) << kWorkspaceBucketShift));
  w |= uint64_t(deterministic) << kDeterministicShift |
       uint64_t(workspace_bucket) << kWorkspaceBucketShift;
  word1_ = w;
}

AlgoKey SettingsKey::copy() const {
  AlgoKey k = *key_;
  std::memcpy(reinterpret_cast<unsigned char*>(&k) + 8, &word1_, 8);
  return k;
}

int AlgoCache::select(const AlgoSlot& slot, const AlgoKey& key_in, const detail::ErasedProblem& p) {
  Impl& m = *impl_;
  const ResolvedSettings& rs = thread_settings();
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
      return i;
    }
  }

  // ---- the hot path: a shared-locked lookup in one shard ----
  const SettingsKey filed(key_in, mode == AlgoMode::deterministic, rs.bucket);
  const uint64_t hash = filed.hash();
  CacheShard& shard = m.shard_of(hash);
  int cached = -1;
  ChoiceSource cached_source = ChoiceSource::heuristic;
  {
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
    }
  }
  const int budget = m.max_benchmarked_keys.load(std::memory_order_relaxed);
  auto budget_left = [&] {
    return m.benchmarked_count[slot.index()].load(std::memory_order_relaxed) < uint32_t(budget);
  };
  bool over_limit = false;
  if (cached >= 0 && slot.enabled(cached)) [[likely]] {
    over_limit = limit != kNoWorkspaceLimit &&
                 p.workspace_bytes(slot.algorithm_ptr(cached), p.problem) > limit;
    bool wants_benchmark =
        mode == AlgoMode::benchmark && cached_source == ChoiceSource::heuristic && budget_left();
    if (!over_limit && !wants_benchmark) [[likely]] {
      shard.hits.fetch_add(1, std::memory_order_relaxed);
      return cached;
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

  if (over_limit) {
    // The cached choice was made under a larger limit of the same bucket: choose again for this
    // call only, leaving the entry to the calls that share its limit.
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    if (logging)
      log_decision(slot, key, "heuristic (cached choice over the workspace limit)", set.usable,
                   set.skipped, slot.algorithm_name(pick.index));
    return pick.index;
  }

  auto choose_heuristic = [&](const char* how) {
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    m.insert(key, hash, pick.index, ChoiceSource::heuristic, 0);
    if (logging)
      log_decision(slot, key, how, set.usable, set.skipped, slot.algorithm_name(pick.index));
    return pick.index;
  };

  if (mode != AlgoMode::benchmark) return choose_heuristic(algo_mode_name(mode));

  if (current_stream_is_capturing(p.device)) {
    // Timing would synchronize inside a capture: use what is known, benchmark after the capture.
    m.capture_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (cached >= 0 && slot.enabled(cached)) {
      if (logging)
        log_decision(slot, key, "capturing, cached", set.usable, set.skipped,
                     slot.algorithm_name(cached));
      return cached;
    }
    return choose_heuristic("capturing, heuristic");
  }

  std::lock_guard<std::recursive_mutex> bench_lock(m.benchmark_mutex);
  {
    // Another thread may have benchmarked this key while we waited for the lock.
    std::shared_lock<SharedSpinLock> lock(shard.mutex);
    auto it = shard.map.find(KeyRef{&key, hash});
    if (it != shard.map.end() && it->second.source != ChoiceSource::heuristic &&
        slot.enabled(it->second.algorithm))
      return it->second.algorithm;
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
        return c.index;
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
  const Candidate* best = nullptr;
  for (Candidate& c : set.usable) {
    if (!scratch) {
      c.failure = "no scratch outputs: " + scratch_failure;
      continue;
    }
    try {
      c.time_ms = time_candidate(slot, p, scratch.get(), c);
      m.candidates_timed.fetch_add(1, std::memory_order_relaxed);
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
      if (c.time_ms >= 0 && c.time_ms <= cutoff) close.push_back(&c);
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
    return pick.index;
  }
  m.insert(key, hash, best->index, ChoiceSource::benchmark, float(best->time_ms));
  m.remember_benchmarked(slot.index(), key, best->index);
  if (logging)
    log_decision(slot, key, "benchmark", set.usable, set.skipped, slot.algorithm_name(best->index));
  return best->index;
}

void AlgoCache::run_erased(const AlgoSlot& slot, const AlgoKey& key,
                           const detail::ErasedProblem& p) {
  int index = select(slot, key, p);
  const void* algo = slot.algorithm_ptr(index);
  size_t ws = p.workspace_bytes(algo, p.problem);
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
