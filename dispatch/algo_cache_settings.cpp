// The AlgoCache's settings: the names of modes and choice sources, and the initial global settings
// read from the environment (EMBER_ALGO_MODE, EMBER_ALGO_WORKSPACE_LIMIT, EMBER_ALGO_FORCE, and
// adaptive mode's EMBER_ALGO_TOP_K, _MAX_TIMED_KEYS, _INITIAL_BUDGET_MS, _STEP_BUDGET_MS,
// _TIMING_SHARE and _REFINE_RUNS). The
// settings in effect (global, and per-thread guards) live with the hot path that reads them on
// every lookup, in algo_cache_lookup.cpp.
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "ember/dispatch/algo_cache_impl.h"

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
    case AlgoMode::adaptive:
      return "adaptive";
  }
  return "?";
}

AlgoMode algo_mode_from_name(std::string_view name) {
  for (AlgoMode m :
       {AlgoMode::heuristic, AlgoMode::benchmark, AlgoMode::deterministic, AlgoMode::adaptive})
    if (name == algo_mode_name(m)) return m;
  EMBER_THROW(bad_param, "unknown algorithm mode '", name,
              "'; expected heuristic, benchmark, adaptive or deterministic");
}

const char* choice_source_name(ChoiceSource s) {
  switch (s) {
    case ChoiceSource::heuristic:
      return "heuristic";
    case ChoiceSource::benchmark:
      return "benchmark";
    case ChoiceSource::nearest:
      return "nearest";
    case ChoiceSource::borrowed:
      return "borrowed";
  }
  return "?";
}

// ---- the environment --------------------------------------------------------------------------

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
  // Adaptive mode's budgets: a number each, at least 0 (a malformed value is a warning).
  auto number = [](const char* name, double& out) {
    const char* v = std::getenv(name);
    if (!v || !*v) return;
    char* end = nullptr;
    double x = std::strtod(v, &end);
    if (end && *end == '\0' && x >= 0)
      out = x;
    else
      algo_warn(std::string(name) + "='" + v + "' ignored: expected a number >= 0");
  };
  double top_k = s.adaptive.top_k, keys = s.adaptive.max_timed_keys_per_op,
         refine = s.adaptive.refine_runs;
  number("EMBER_ALGO_TOP_K", top_k);
  number("EMBER_ALGO_MAX_TIMED_KEYS", keys);
  number("EMBER_ALGO_INITIAL_BUDGET_MS", s.adaptive.initial_budget_ms);
  number("EMBER_ALGO_STEP_BUDGET_MS", s.adaptive.step_budget_ms);
  number("EMBER_ALGO_TIMING_SHARE", s.adaptive.timing_share);
  number("EMBER_ALGO_REFINE_RUNS", refine);
  s.adaptive.top_k = int(std::min(top_k, 1e6));
  s.adaptive.max_timed_keys_per_op = int(std::min(keys, 1e6));
  s.adaptive.refine_runs = int(std::min(refine, 1e6));
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

}  // namespace ember::dispatch
