// The AlgoCache's adaptive mode: benchmarking with budgets, for workloads whose shapes vary. A new
// key borrows the timed choice of a key in its size class (size_class_key) when one exists, else
// the cost model's top-k candidates are timed while the timing budget lasts, else the heuristic
// decides; borrowed and heuristic entries are timed later, from the steady pool of the budget
// (which refills with wall time and at tune_pending()), and never while a CUDA graph is captured.
// docs/dispatch.md ("Adaptive mode") explains the settings and why.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache_impl.h"

namespace ember::dispatch {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- the timing budget --------------------------------------------------------------------

namespace {
// Marks when the steady pool is positive again (now when it is), for the hot path's check.
void publish_ready_time(TimingBudget& b, const AdaptiveSettings& s, int64_t now_ns) {
  int64_t ready = 0;
  if (b.steady_ms <= 0) {
    ready = s.timing_share > 0 ? now_ns + int64_t((-b.steady_ms + 1e-3) / s.timing_share * 1e6)
                               : std::numeric_limits<int64_t>::max();
  }
  b.steady_ready_ns.store(ready, std::memory_order_relaxed);
}
}  // namespace

void TimingBudget::refill(const AdaptiveSettings& s, int64_t now_ns) {
  if (!started) {
    started = true;
    warmup_ms = s.initial_budget_ms;
    steady_ms = 0;
    last_refill_ns = now_ns;
  }
  const double elapsed_ms = double(now_ns - last_refill_ns) / 1e6;
  steady_ms = std::min(s.step_budget_ms, steady_ms + s.timing_share * std::max(elapsed_ms, 0.0));
  last_refill_ns = now_ns;
  publish_ready_time(*this, s, now_ns);
}

void TimingBudget::spend(const AdaptiveSettings& s, double ms, bool warmup_allowed,
                         int64_t now_ns) {
  if (warmup_allowed && warmup_ms > 0) {
    const double from_warmup = std::min(ms, warmup_ms);
    warmup_ms -= from_warmup;
    ms -= from_warmup;
  }
  steady_ms -= ms;
  publish_ready_time(*this, s, now_ns);
}

size_t AlgoCache::tune_pending() {
  Impl& m = *impl_;
  const AdaptiveSettings s = current_algo_settings().adaptive;
  {
    TimingBudget& b = m.timing_budget;
    std::lock_guard<std::mutex> lock(b.mutex);
    const int64_t now = steady_now_ns();
    b.refill(s, now);
    b.steady_ms = std::max(b.steady_ms, 0.0) + s.step_budget_ms;
    b.steady_ms = std::min(b.steady_ms, std::max(s.step_budget_ms, 0.0));
    publish_ready_time(b, s, now);
  }
  return size_t(std::max<int64_t>(m.untimed_entries.load(std::memory_order_relaxed), 0));
}

bool AlgoCache::Impl::untimed_entry_wants_timing(const AlgoSlot& slot, const AlgoSettings& settings,
                                                 ChoiceSource source) {
  const int budget = effective_key_budget(settings);
  if (benchmarked_count[slot.index()].load(std::memory_order_relaxed) >= uint32_t(budget))
    return false;
  if (settings.mode == AlgoMode::benchmark)
    return source == ChoiceSource::heuristic || source == ChoiceSource::borrowed;
  return steady_now_ns() >= timing_budget.steady_ready_ns.load(std::memory_order_relaxed);
}

// ---- size classes -------------------------------------------------------------------------

bool AlgoCache::Impl::find_class_mate(int slot_index, const AlgoKey& key,
                                      const std::vector<Candidate>& usable, BenchmarkedKey& found) {
  const AlgoKey cls = size_class_key(key);
  std::lock_guard<std::mutex> lock(policy_mutex);
  auto it = benchmarked_keys.find(slot_index);
  if (it == benchmarked_keys.end()) return false;
  double best = std::numeric_limits<double>::infinity();
  bool any = false;
  for (const BenchmarkedKey& b : it->second) {
    if (b.size_class != cls || b.key == key) continue;
    bool applies = false;
    for (const Candidate& c : usable) applies = applies || c.index == b.algorithm;
    if (!applies) continue;
    // The nearest class-mate; ties keep the first timed, so the choice depends only on the keys.
    const double d = size_distance(b.key, key);
    if (d < best) {
      best = d;
      found = b;
      any = true;
    }
  }
  return any;
}

// ---- the miss path ------------------------------------------------------------------------

AlgoCache::Selection AlgoCache::Impl::choose_adaptive(const AlgoSlot& slot, const AlgoKey& key,
                                                      uint64_t hash, const detail::ErasedProblem& p,
                                                      CandidateSet& set,
                                                      const AdaptiveSettings& settings, int cached,
                                                      ChoiceSource cached_source, int budget) {
  Impl& m = *this;
  const bool logging = algo_log_enabled();
  auto selection = [&](int index) -> Selection {
    for (const Candidate& c : set.usable)
      if (c.index == index) return {index, c.workspace_bytes};
    return {index, kWorkspaceNotComputed};
  };
  // An entry made earlier (heuristic or borrowed) that a timing may replace.
  const bool pending = cached >= 0 && slot.enabled(cached) && [&] {
    for (const Candidate& c : set.usable)
      if (c.index == cached) return true;
    return false;
  }();
  auto keep_cached = [&](const std::string& why) -> Selection {
    if (logging) {
      const std::string how = why + ", keeps the " + choice_source_name(cached_source) + " choice";
      log_decision(slot, key, how.c_str(), set.usable, set.skipped, slot.algorithm_name(cached));
    }
    return selection(cached);
  };
  // A choice without timing for a new key: a timed class-mate's, else the heuristic's.
  auto provisional = [&](const std::string& why) -> Selection {
    BenchmarkedKey mate;
    if (m.find_class_mate(slot.index(), key, set.usable, mate)) {
      m.borrowed.fetch_add(1, std::memory_order_relaxed);
      m.insert(key, hash, mate.algorithm, ChoiceSource::borrowed, 0);
      if (logging) {
        const std::string how =
            "borrowed from " + mate.key.to_string() + (why.empty() ? "" : " (" + why + ")");
        log_decision(slot, key, how.c_str(), set.usable, set.skipped,
                     slot.algorithm_name(mate.algorithm));
      }
      return selection(mate.algorithm);
    }
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    m.insert(key, hash, pick.index, ChoiceSource::heuristic, 0);
    if (logging)
      log_decision(slot, key, ("heuristic (" + why + ")").c_str(), set.usable, set.skipped,
                   slot.algorithm_name(pick.index));
    return {pick.index, pick.workspace_bytes};
  };

  if (current_stream_is_capturing(p.device)) {
    // Timing would synchronize inside a capture: what is known now, timed after the capture.
    m.capture_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (pending) return keep_cached("capturing");
    return provisional("capturing");
  }

  std::lock_guard<std::recursive_mutex> bench_lock(m.benchmark_mutex);
  {
    // Another thread may have timed this key while we waited for the lock.
    CacheShard& shard = m.shard_of(hash);
    std::shared_lock<SharedSpinLock> lock(shard.mutex);
    auto it = shard.map.find(KeyRef{&key, hash});
    if (it != shard.map.end() && it->second.source == ChoiceSource::benchmark &&
        slot.enabled(it->second.algorithm))
      return selection(it->second.algorithm);
  }

  const bool keys_left =
      m.benchmarked_count[slot.index()].load(std::memory_order_relaxed) < uint32_t(budget);
  TimingBudget& b = m.timing_budget;
  bool may_time = false;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    const int64_t now = steady_now_ns();
    b.refill(settings, now);
    // A new key may use the warm-up pool; re-timing a pending entry only the steady pool, so a
    // shape storm of keys that can borrow costs at most the steady pool's share of the run.
    may_time = keys_left && (b.steady_ms > 0 || (!pending && b.warmup_ms > 0));
  }
  if (!pending) {
    BenchmarkedKey mate;
    // A timed class-mate decides for now (the exact key is timed later from the steady pool).
    if (m.find_class_mate(slot.index(), key, set.usable, mate)) return provisional("");
    if (!may_time) {
      m.budget_fallbacks.fetch_add(1, std::memory_order_relaxed);
      return provisional(keys_left ? "timing budget spent" : "per-op key budget spent");
    }
  } else if (!may_time) {
    return keep_cached(keys_left ? "timing budget spent" : "per-op key budget spent");
  }

  // ---- time the cost model's top k ----
  std::vector<Candidate> ranked = set.usable;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Candidate& a, const Candidate& c) {
    const void* pa = slot.algorithm_ptr(a.index);
    const void* pc = slot.algorithm_ptr(c.index);
    const bool ha = p.has_heuristic_cost(pa), hc = p.has_heuristic_cost(pc);
    if (ha != hc) return ha;
    return ha && p.heuristic_cost(pa, p.problem) < p.heuristic_cost(pc, p.problem);
  });
  const size_t k = std::clamp<size_t>(size_t(std::max(settings.top_k, 1)), 1, ranked.size());
  CandidateSet top;
  top.usable.assign(ranked.begin(), ranked.begin() + ptrdiff_t(k));
  top.skipped = set.skipped;
  for (size_t i = k; i < ranked.size(); ++i)
    top.skipped.push_back(slot.algorithm_name(ranked[i].index) + " (outside the top " +
                          std::to_string(k) + ")");
  m.candidates_beyond_top_k.fetch_add(ranked.size() - k, std::memory_order_relaxed);

  m.benchmarked_count[slot.index()].fetch_add(1, std::memory_order_relaxed);
  const int64_t t0 = steady_now_ns();
  const Candidate* best = m.benchmark(slot, p, top, settings.refine_runs);
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    const int64_t now = steady_now_ns();
    b.refill(settings, now);
    b.spend(settings, double(now - t0) / 1e6, /*warmup_allowed=*/!pending, now);
  }
  if (!best) {
    // Nothing ran: keep what there was (or the heuristic's choice, uncached) for this call.
    if (pending) return keep_cached("timing failed for every candidate");
    const Candidate& pick = heuristic_pick(slot, p, set.usable);
    m.heuristic_choices.fetch_add(1, std::memory_order_relaxed);
    if (logging)
      log_decision(slot, key, "timing failed for every candidate, heuristic", top.usable,
                   top.skipped, slot.algorithm_name(pick.index));
    return {pick.index, pick.workspace_bytes};
  }
  m.insert(key, hash, best->index, ChoiceSource::benchmark, float(best->time_ms));
  m.remember_benchmarked(slot.index(), key, best->index);
  if (pending) m.retimed.fetch_add(1, std::memory_order_relaxed);
  if (logging) {
    std::string how =
        "timed (top " + std::to_string(k) + " of " + std::to_string(ranked.size()) + ")";
    if (pending)
      how += ", replaces the " + std::string(choice_source_name(cached_source)) + " choice " +
             slot.algorithm_name(cached);
    log_decision(slot, key, how.c_str(), top.usable, top.skipped, slot.algorithm_name(best->index));
  }
  return selection(best->index);
}

}  // namespace ember::dispatch
