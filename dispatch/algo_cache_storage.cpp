// The AlgoCache's storage: construction, inserting entries (with the change epoch and the
// dirty flag), LRU eviction to the capacity, the dynamic-shape policy's benchmarked keys (with
// their size classes, for adaptive mode), and clearing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "ember/dispatch/algo_cache_impl.h"

namespace ember::dispatch {

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

void AlgoCache::Impl::insert(const AlgoKey& key, uint64_t hash, int algorithm, ChoiceSource source,
                             float time_ms, bool from_file) {
  bool added = false;
  {
    CacheShard& shard = shard_of(hash);
    std::unique_lock<SharedSpinLock> lock(shard.mutex);
    auto [it, inserted] = shard.map.try_emplace(StoredKey{key, hash});
    CacheEntry& e = it->second;
    const int64_t untimed_before = inserted ? 0 : e.source != ChoiceSource::benchmark;
    const int64_t untimed_after = source != ChoiceSource::benchmark;
    if (untimed_after != untimed_before)
      untimed_entries.fetch_add(untimed_after - untimed_before, std::memory_order_relaxed);
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
      if (it->second.source != ChoiceSource::benchmark)
        untimed_entries.fetch_sub(1, std::memory_order_relaxed);
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
  list.push_back({key, size_class_key(key), algorithm});
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
    for (const auto& [k, e] : shard.map)
      if (e.source != ChoiceSource::benchmark)
        impl_->untimed_entries.fetch_sub(1, std::memory_order_relaxed);
    shard.clear();
    impl_->epoch.fetch_add(1, std::memory_order_release);
  }
  std::lock_guard<std::mutex> lock(impl_->policy_mutex);
  impl_->benchmarked_keys.clear();
  for (auto& c : impl_->benchmarked_count) c = 0;
  std::lock_guard<std::mutex> budget_lock(impl_->timing_budget.mutex);
  impl_->timing_budget.started = false;  // adaptive mode's warm-up pool is available again
  impl_->timing_budget.steady_ready_ns = 0;
}

}  // namespace ember::dispatch
