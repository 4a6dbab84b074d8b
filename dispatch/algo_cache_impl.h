// Internal to dispatch/algo_cache*.cpp: the AlgoCache's storage (sharded hash maps with an LRU
// clock and a change epoch, per-thread hit counters, the dynamic-shape policy's per-slot state,
// statistics), the candidates of a decision, and the helpers the files of the cache share (the
// settings, lookup, miss, benchmark, storage, statistics and persistence code). Not installed for
// users; include dispatch/algo_cache.h instead.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ember/dispatch/algo_cache.h"

namespace ember::dispatch {

// A key with its hash computed once: the shard index and the map both use it.
struct StoredKey {
  AlgoKey key;
  uint64_t hash = 0;
};
struct KeyRef {
  const AlgoKey* key;
  uint64_t hash;
};

// A caller's key as the cache files it: the same bytes with `deterministic` and
// `workspace_bucket` (both in the key's second 8-byte word) replaced by the current settings. The
// hot path hashes and compares it in place, without copying 256 bytes and reading back the two
// patched bytes (a store-forwarding stall).
class SettingsKey {
 public:
  // Defined here, not in a .cpp: an out-of-line member of the shared library is called through
  // the PLT and never inlined (it could be interposed), which this hot path cannot afford.
  SettingsKey(const AlgoKey& key, uint8_t deterministic, uint8_t workspace_bucket) : key_(&key) {
    static_assert(std::endian::native == std::endian::little, "SettingsKey patches by shifts");
    static_assert(
        offsetof(AlgoKey, deterministic) / 8 == 1 && offsetof(AlgoKey, workspace_bucket) / 8 == 1,
        "SettingsKey patches the key's second 8-byte word");
    constexpr int kDeterministicShift = int(8 * (offsetof(AlgoKey, deterministic) - 8));
    constexpr int kWorkspaceBucketShift = int(8 * (offsetof(AlgoKey, workspace_bucket) - 8));
    uint64_t w = word(8);
    w &= ~((uint64_t(0xFF) << kDeterministicShift) | (uint64_t(0xFF) << kWorkspaceBucketShift));
    w |= uint64_t(deterministic) << kDeterministicShift | uint64_t(workspace_bucket)
                                                              << kWorkspaceBucketShift;
    word1_ = w;
  }

  // Equals AlgoKey::hash() of the patched copy (the miss path checks it): the same function, with
  // the patched second word read from word1_ (the branch folds away when the loop unrolls).
  uint64_t hash() const {
    return AlgoKey::hash_words([this](size_t at) { return at == 8 ? word1_ : word(at); });
  }

  bool equals(const AlgoKey& filed) const {
    const unsigned char* f = reinterpret_cast<const unsigned char*>(&filed);
    auto filed_word = [f](size_t at) {
      uint64_t v;
      std::memcpy(&v, f + at, 8);
      return v;
    };
    uint64_t diff = (filed_word(0) ^ word(0)) | (filed_word(8) ^ word1_);
    for (size_t at = 16; at < sizeof(AlgoKey); at += 8) diff |= filed_word(at) ^ word(at);
    return diff == 0;
  }

  // The patched copy (the miss path files it).
  AlgoKey copy() const;

 private:
  uint64_t word(size_t at) const {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(key_) + at, 8);
    return v;
  }
  const AlgoKey* key_;
  uint64_t word1_;  // bytes 8..15 with the settings in place
};
struct SettingsKeyRef {
  const SettingsKey* key;
  uint64_t hash;
};

struct StoredKeyHash {
  using is_transparent = void;
  size_t operator()(const StoredKey& k) const { return size_t(k.hash); }
  size_t operator()(const KeyRef& k) const { return size_t(k.hash); }
  size_t operator()(const SettingsKeyRef& k) const { return size_t(k.hash); }
};
struct StoredKeyEqual {
  using is_transparent = void;
  bool operator()(const StoredKey& a, const StoredKey& b) const {
    return a.hash == b.hash && a.key == b.key;
  }
  bool operator()(const KeyRef& a, const StoredKey& b) const {
    return a.hash == b.hash && *a.key == b.key;
  }
  bool operator()(const StoredKey& a, const KeyRef& b) const {
    return a.hash == b.hash && a.key == *b.key;
  }
  bool operator()(const SettingsKeyRef& a, const StoredKey& b) const {
    return a.hash == b.hash && a.key->equals(b.key);
  }
  bool operator()(const StoredKey& a, const SettingsKeyRef& b) const {
    return a.hash == b.hash && b.key->equals(a.key);
  }
};

// A reader-writer spin lock for one shard: a shared lock is one atomic add and one subtract, about
// half of what std::shared_mutex costs, and the hot path takes one per lookup. Writers (inserts,
// evictions) are rare and short; they raise the writer bit, which turns new readers away, then wait
// for the readers inside to leave. Spinners yield after 64 pauses, in case the holder was
// descheduled.
class SharedSpinLock {
 public:
  void lock_shared() {
    for (int spins = 0;; ++spins) {
      if (!(state_.fetch_add(1, std::memory_order_acquire) & kWriter)) return;
      state_.fetch_sub(1, std::memory_order_relaxed);
      while (state_.load(std::memory_order_relaxed) & kWriter) backoff(spins);
    }
  }
  void unlock_shared() { state_.fetch_sub(1, std::memory_order_release); }
  void lock() {
    for (int spins = 0;; ++spins) {
      uint32_t s = state_.load(std::memory_order_relaxed);
      if (!(s & kWriter) && state_.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire))
        break;
      backoff(spins);
    }
    for (int spins = 0; state_.load(std::memory_order_acquire) != kWriter; ++spins) backoff(spins);
  }
  void unlock() { state_.fetch_and(~kWriter, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  static void backoff(int& spins) {
    if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
  std::atomic<uint32_t> state_{0};  // reader count, plus kWriter while a writer holds or waits
};

struct CacheEntry {
  int16_t algorithm = -1;  // index in the key's slot
  ChoiceSource source = ChoiceSource::heuristic;
  float time_ms = 0;
  // LRU clock: the cache epoch at the last use. The epoch advances only when the maps change, so
  // lookups never write a shared counter, and an entry is rewritten at most once per change.
  // Eviction takes the entry with the oldest stamp: LRU at the resolution of changes (entries
  // used since the last change tie as the most recent).
  std::atomic<uint64_t> last_used{0};
};

struct alignas(64) CacheShard {
  using Map = std::unordered_map<StoredKey, CacheEntry, StoredKeyHash, StoredKeyEqual>;
  using Node = Map::value_type;
  static constexpr size_t kFrontSlots = 64;

  mutable SharedSpinLock mutex;
  Map map;
  // A direct-mapped index in front of the map, by the hash's low bits: a lookup that the thread's
  // remembered hits cannot answer (the first one after a change of the cache) usually finds its
  // entry here, without the map's modulo (a 64-bit division) and bucket walk. Lookups fill it
  // under the shared lock (map nodes never move); erasing a node, under the exclusive lock,
  // clears the slot that points to it.
  std::array<std::atomic<Node*>, kFrontSlots> front{};

  std::atomic<Node*>& front_slot(uint64_t hash) { return front[hash % kFrontSlots]; }
  // Erases `it` (exclusive lock held), clearing its front slot.
  void erase(Map::iterator it) {
    std::atomic<Node*>& slot = front_slot(it->first.hash);
    if (slot.load(std::memory_order_relaxed) == &*it)
      slot.store(nullptr, std::memory_order_relaxed);
    map.erase(it);
  }
  // Erases everything (exclusive lock held).
  void clear() {
    for (std::atomic<Node*>& slot : front) slot.store(nullptr, std::memory_order_relaxed);
    map.clear();
  }
};

// The hits of one thread on one cache. Only that thread writes it, with a plain load and store
// (no atomic read-modify-write, which costs as much as the rest of a hit); stats() reads it.
struct alignas(64) ThreadHitCounter {
  std::atomic<uint64_t> hits{0};
  void add_one() {
    hits.store(hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

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

// A key the dynamic-shape policy may reuse, with its benchmarked choice and its size class
// (adaptive mode borrows within a class).
struct BenchmarkedKey {
  AlgoKey key;
  AlgoKey size_class;
  int algorithm;
};

// Adaptive mode's timing budget (AdaptiveSettings): the warm-up pool, spent once, and the steady
// pool, refilled at timing_share of the wall time (and by tune_pending) up to step_budget_ms; it
// may go negative when one timing overruns it, which delays the next. Guarded by its mutex; the
// hot path reads only steady_ready_ns.
struct TimingBudget {
  std::mutex mutex;
  bool started = false;
  double warmup_ms = 0;
  double steady_ms = 0;
  int64_t last_refill_ns = 0;
  // steady_clock nanoseconds from which the steady pool is positive again (0: it is now). A
  // borrowed or heuristic entry found by a lookup goes to the miss path to be re-timed only
  // after this time, so a spent budget costs a lookup one clock read.
  std::atomic<int64_t> steady_ready_ns{0};

  // Refills the steady pool for the time since the last refill (mutex held).
  void refill(const AdaptiveSettings& s, int64_t now_ns);
  // Charges `ms` of timing, to the warm-up pool first when `warmup_allowed` (mutex held).
  void spend(const AdaptiveSettings& s, double ms, bool warmup_allowed, int64_t now_ns);
};
int64_t steady_now_ns();

struct AlgoCache::Impl {
  static constexpr int kNumShards = 16;
  std::array<CacheShard, kNumShards> shards;

  // Unique per cache in this process (never reused), so a thread's remembered hits of a destroyed
  // cache can never be taken for hits of a new one at the same address.
  const uint64_t id;
  // Advances at every change of the maps (insertion, overwrite, erasure, clear), inside the
  // shard's exclusive lock. It is the LRU clock (entries are stamped with it when used), and a
  // thread's remembered hit is valid only while the epoch is the one it read before the lookup
  // that found it. Written only on misses: on its own cache line, which hits only read.
  alignas(64) std::atomic<uint64_t> epoch{0};

  alignas(64) std::atomic<size_t> capacity{kDefaultCapacity};
  std::atomic<size_t> entries{0};
  std::mutex evict_mutex;  // one evictor at a time, so the bound is never overshot by a race

  // Dynamic-shape policy, per slot index.
  std::atomic<int> max_benchmarked_keys{kDefaultMaxBenchmarkedKeysPerOp};
  std::array<std::atomic<uint32_t>, kMaxAlgoSlots> benchmarked_count{};  // this process
  std::mutex policy_mutex;                                               // guards benchmarked_keys
  std::unordered_map<int, std::vector<BenchmarkedKey>> benchmarked_keys;

  // Held while benchmarking: concurrent timings would disturb each other, and a second thread
  // missing on the same key waits and then finds the first one's result. Recursive because an
  // algorithm may itself dispatch through the cache.
  std::recursive_mutex benchmark_mutex;

  std::atomic<bool> dirty{false};

  TimingBudget timing_budget;  // adaptive mode (algo_cache_adaptive.cpp)
  // Entries not timed (heuristic, borrowed, nearest) now in the maps: what tune_pending() returns
  // without walking them. Kept by insert, eviction and clear.
  std::atomic<int64_t> untimed_entries{0};

  // Hits: one counter per thread that used this cache, found by thread id (a thread that reuses
  // an exited thread's id continues its counter: still one writer at a time). stats() reports the
  // sum minus hits_at_reset, so reset_stats() never writes another thread's counter.
  std::mutex hit_counters_mutex;
  std::vector<std::pair<std::thread::id, std::unique_ptr<ThreadHitCounter>>> hit_counters;
  std::atomic<uint64_t> hits_at_reset{0};
  ThreadHitCounter& hit_counter_of_this_thread();
  uint64_t total_hits();

  // Other statistics.
  std::atomic<uint64_t> misses{0}, benchmarks{0}, candidates_timed{0}, candidates_failed{0},
      candidates_pruned{0}, benchmark_ns{0}, heuristic_choices{0}, nearest_reuses{0},
      capture_fallbacks{0}, forced_choices{0}, workspace_fallbacks{0}, evictions{0},
      loaded_entries{0}, borrowed{0}, retimed{0}, budget_fallbacks{0}, candidates_beyond_top_k{0};

  Impl();

  CacheShard& shard_of(uint64_t hash) { return shards[hash >> 60]; }
  const CacheShard& shard_of(uint64_t hash) const { return shards[hash >> 60]; }

  // Inserts or overwrites; evicts the least recently used entries beyond capacity. A benchmarked
  // entry makes the cache dirty (worth saving) unless it came from a file.
  void insert(const AlgoKey& key, uint64_t hash, int algorithm, ChoiceSource source, float time_ms,
              bool from_file = false);
  // Evicts least recently used entries until at most `capacity` remain.
  void evict_to_capacity();
  void remember_benchmarked(int slot_index, const AlgoKey& key, int algorithm);

  // Decisions off the hot path (algo_cache_miss.cpp). The choice AlgoSettings::forced names for
  // `slot`, validated; index -1 when nothing is forced for it.
  AlgoCache::Selection forced_choice(const AlgoSlot& slot, const AlgoKey& key,
                                     const detail::ErasedProblem& p, const AlgoSettings& settings);
  // A lookup that found no usable entry, or one to re-make: `cached` is the entry's algorithm (-1
  // when none) and `cached_source` how it was made, `over_limit` whether it needs more workspace
  // than the limit, `budget` the keys per op that may be timed (effective_key_budget).
  AlgoCache::Selection choose_on_miss(const AlgoSlot& slot, const SettingsKey& filed, uint64_t hash,
                                      const detail::ErasedProblem& p, const AlgoSettings& settings,
                                      int cached, ChoiceSource cached_source, bool over_limit,
                                      int budget);
  // The distinct keys per op.direction the current mode may time: the cache's bound, and in
  // adaptive mode also AdaptiveSettings::max_timed_keys_per_op.
  int effective_key_budget(const AlgoSettings& settings) const {
    int budget = max_benchmarked_keys.load(std::memory_order_relaxed);
    if (settings.mode == AlgoMode::adaptive && settings.adaptive.max_timed_keys_per_op < budget)
      budget = std::max(settings.adaptive.max_timed_keys_per_op, 0);
    return budget;
  }
  // A hit on an entry not timed (heuristic, borrowed, nearest) in benchmark or adaptive mode:
  // whether to go to the miss path to time it now (key budget left; in adaptive mode, the steady
  // pool positive). Off the hot path of timed entries.
  bool untimed_entry_wants_timing(const AlgoSlot& slot, const AlgoSettings& settings,
                                  ChoiceSource source);
  // Adaptive mode's miss path (algo_cache_adaptive.cpp): borrow, time the top-k, or fall back.
  AlgoCache::Selection choose_adaptive(const AlgoSlot& slot, const AlgoKey& key, uint64_t hash,
                                       const detail::ErasedProblem& p, CandidateSet& set,
                                       const AdaptiveSettings& settings, int cached,
                                       ChoiceSource cached_source, int budget);
  // The timed key of `key`'s size class nearest to it whose algorithm is among `usable`, or null
  // (policy_mutex taken inside). `found` receives a copy of it.
  bool find_class_mate(int slot_index, const AlgoKey& key, const std::vector<Candidate>& usable,
                       BenchmarkedKey& found);
  // Times every usable candidate of `set` on scratch outputs (algo_cache_benchmark.cpp), filling
  // their times and failures; the fastest, or null when none ran.
  // `refine_runs`: the runs of the refinement round (0: none).
  const Candidate* benchmark(const AlgoSlot& slot, const detail::ErasedProblem& p,
                             CandidateSet& set, int refine_runs = 10);
};
static_assert(AlgoCache::Impl::kNumShards == 16, "shard_of uses the top 4 bits of the hash");

// The slot a key belongs to (op, direction and device type are in the key).
inline AlgoSlot& slot_of(const AlgoKey& key) {
  return algo_slot(key.op, Direction(key.direction), DeviceType(key.device_type));
}

// Writes one line to the algorithm log (stderr or the sink).
void algo_log(const std::string& line);
// Prints a warning about the algorithm cache to stderr (always, not only when logging).
void algo_warn(const std::string& message);

// The initial global settings: EMBER_ALGO_MODE, EMBER_ALGO_WORKSPACE_LIMIT, EMBER_ALGO_FORCE
// (a malformed value is a warning and is ignored).
AlgoSettings settings_from_environment();

// The enabled algorithms of `slot` that may run `p` (deterministic ones only when asked, within
// the workspace limit), and the others with the reason they were skipped.
CandidateSet gather_candidates(const AlgoSlot& slot, const detail::ErasedProblem& p,
                               bool deterministic_only, size_t workspace_limit);
// The heuristic: the lowest heuristic_cost; algorithms without an estimate rank after those with
// one, in registration order. `usable` is not empty.
const Candidate& heuristic_pick(const AlgoSlot& slot, const detail::ErasedProblem& p,
                                const std::vector<Candidate>& usable);
// not_supported: no algorithm of `slot` can run `key`, with the reasons.
[[noreturn]] void throw_no_candidate(const AlgoSlot& slot, const AlgoKey& key,
                                     const CandidateSet& set, size_t limit);
// One decision as one log line: op, key, how it was made, the candidates, the choice.
void log_decision(const AlgoSlot& slot, const AlgoKey& key, const char* how,
                  const std::vector<Candidate>& usable, const std::vector<std::string>& skipped,
                  const std::string& choice);
// "1.5 MiB"; "unlimited" for kNoWorkspaceLimit.
std::string format_bytes(size_t bytes);
// The first line of an exception's message.
std::string first_line(const char* what);

}  // namespace ember::dispatch
