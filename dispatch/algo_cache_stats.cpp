// The AlgoCache's statistics (per-thread hit counters summed on demand, the other counters) and
// its decision log (EMBER_LOG_ALGOS, the sink, warnings, the one-line form of a decision).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "ember/dispatch/algo_cache_impl.h"

namespace ember::dispatch {

// ---- statistics -------------------------------------------------------------------------------

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
  s.borrowed = m.borrowed;
  s.retimed = m.retimed;
  s.budget_fallbacks = m.budget_fallbacks;
  s.candidates_beyond_top_k = m.candidates_beyond_top_k;
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
        &m.forced_choices, &m.workspace_fallbacks, &m.evictions, &m.loaded_entries, &m.borrowed,
        &m.retimed, &m.budget_fallbacks, &m.candidates_beyond_top_k})
    c->store(0);
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

namespace {
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
}  // namespace

void log_decision(const AlgoSlot& slot, const AlgoKey& key, const char* how,
                  const std::vector<Candidate>& usable, const std::vector<std::string>& skipped,
                  const std::string& choice) {
  algo_log(slot.name() + " " + key.to_string() + " | " + how + ": " +
           describe_candidates(slot, usable, skipped) + " -> " + choice);
}

}  // namespace ember::dispatch
