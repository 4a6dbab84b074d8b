// The AlgoCache's lookup: the settings in effect (global settings and per-thread guards), each
// thread's remembered hits and hit counters, the hot path of a lookup (forced choices aside, a
// remembered hit or a shared-locked lookup in one shard; a miss goes to algo_cache_miss.cpp),
// running with a workspace, and peek(). The thread state and the global settings are defined in
// this file so that the hot path inlines their reads.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "ember/dispatch/algo_cache_impl.h"
#include "ember/tensor/runtime/allocator.h"

namespace ember::dispatch {

// ---- settings ---------------------------------------------------------------------------------

namespace {
struct ResolvedSettings {
  AlgoSettings settings;
  uint8_t bucket = 255;
  ResolvedSettings() = default;
  explicit ResolvedSettings(const AlgoSettings& s)
      : settings(s), bucket(workspace_bucket(s.workspace_limit_bytes)) {}
};

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
  // 3 keys in use fall into misses every time.
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

  // ---- forced: the user's choice, validated, never cached (algo_cache_miss.cpp) ----
  if (!settings.forced.empty()) [[unlikely]] {
    const Selection forced = m.forced_choice(slot, key_in, p, settings);
    if (forced.index >= 0) return forced;
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
    // looked up (the miss path chooses for this call alone).
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
  bool over_limit = false;
  if (cached >= 0 && slot.enabled(cached)) [[likely]] {
    size_t workspace = kWorkspaceNotComputed;
    if (limit != kNoWorkspaceLimit) {
      workspace = p.workspace_bytes(slot.algorithm_ptr(cached), p.problem);
      over_limit = workspace > limit;
    }
    // An entry not timed yet (heuristic, borrowed, nearest) may be timed now in benchmark and
    // adaptive mode (budgets permitting): checked off the line, timed entries skip it.
    bool wants_timing = false;
    if (cached_source != ChoiceSource::benchmark &&
        (mode == AlgoMode::benchmark || mode == AlgoMode::adaptive)) [[unlikely]]
      wants_timing = m.untimed_entry_wants_timing(slot, settings, cached_source);
    if (!over_limit && !wants_timing) [[likely]] {
      lookups.count_hit(m);
      return {cached, workspace};
    }
  }

  // ---- the miss path (algo_cache_miss.cpp) ----
  return m.choose_on_miss(slot, filed, hash, p, settings, cached, cached_source, over_limit,
                          m.effective_key_budget(settings));
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
