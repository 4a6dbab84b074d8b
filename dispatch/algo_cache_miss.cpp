// The AlgoCache's decisions off the hot path: the candidates of a problem (applicability,
// determinism, workspace limit), the heuristic, forced choices, and the miss path (heuristic
// choice, capture fallback, the dynamic-shape policy, then the benchmark of
// algo_cache_benchmark.cpp; adaptive mode continues in algo_cache_adaptive.cpp), plus the capture
// check that keeps timing out of a CUDA graph (and its fake for tests).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ember/dispatch/algo_cache_impl.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember::dispatch {

// ---- capture detection ------------------------------------------------------------------------

namespace {
std::atomic<bool> g_fake_capture{false};
}  // namespace

void set_fake_capture_for_testing(bool on) { g_fake_capture.store(on); }

bool current_stream_is_capturing(Device device) {
  if (g_fake_capture.load(std::memory_order_relaxed)) [[unlikely]]
    return true;
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

// ---- candidates -------------------------------------------------------------------------------

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

std::string first_line(const char* what) {
  std::string s(what);
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// ---- forced: the user's choice, validated, never cached ---------------------------------------

AlgoCache::Selection AlgoCache::Impl::forced_choice(const AlgoSlot& slot, const AlgoKey& key_in,
                                                    const detail::ErasedProblem& p,
                                                    const AlgoSettings& settings) {
  Impl& m = *this;
  const size_t limit = settings.workspace_limit_bytes;
  const AlgoMode mode = settings.mode;
  auto it = settings.forced.find(std::string_view(slot.name()));
  if (it == settings.forced.end())
    it = settings.forced.find(std::string_view(slot.name()).substr(0, slot.name().rfind('.')));
  if (it == settings.forced.end()) return {-1};  // nothing forced for this op
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
    EMBER_THROW(bad_param, slot.name(), ": the forced algorithm '", name, "' does not apply to ",
                key_in.to_string(), "; algorithms that apply: ", ok.str(),
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

// ---- the miss path ----------------------------------------------------------------------------

AlgoCache::Selection AlgoCache::Impl::choose_on_miss(const AlgoSlot& slot, const SettingsKey& filed,
                                                     uint64_t hash, const detail::ErasedProblem& p,
                                                     const AlgoSettings& settings, int cached,
                                                     ChoiceSource cached_source, bool over_limit,
                                                     int budget) {
  Impl& m = *this;
  const AlgoMode mode = settings.mode;
  const size_t limit = settings.workspace_limit_bytes;
  CacheShard& shard = m.shard_of(hash);
  auto budget_left = [&] {
    return m.benchmarked_count[slot.index()].load(std::memory_order_relaxed) < uint32_t(budget);
  };
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

  if (mode == AlgoMode::adaptive)
    return m.choose_adaptive(slot, key, hash, p, set, settings.adaptive, cached, cached_source,
                             budget);
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
      if (it != shard.map.end() && it->second.source == ChoiceSource::benchmark &&
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
  const Candidate* best = m.benchmark(slot, p, set);
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

}  // namespace ember::dispatch
