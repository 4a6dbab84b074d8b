// examples/common: how the example programs choose their algorithms (--algo-mode). As PyTorch's
// training scripts set torch.backends.cudnn.benchmark = True, a GPU run times the applicable
// algorithms once per new shape (the algorithm cache's benchmark mode: a few seconds on the first
// step of ResNet-50, then what was fastest; EMBER_ALGO_CACHE=FILE keeps the choices across runs)
// unless told otherwise; a CPU run keeps the cost model (heuristic mode).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"

namespace ember::examples {

constexpr const char* kAlgoModeHelp =
    "benchmark (time each candidate once per shape; the default on a GPU), heuristic (cost "
    "model, no timing; the default on the CPU) or deterministic; EMBER_ALGO_MODE also sets it";

// The mode for a run on `device`: `flag` (--algo-mode; an unknown name is algo_mode_from_name's
// error) when given, else none (the process-wide
// settings, which EMBER_ALGO_MODE initialises) when EMBER_ALGO_MODE is set or on the CPU, else
// benchmark.
inline std::optional<dispatch::AlgoMode> algo_mode_for(const std::string& flag, Device device) {
  if (!flag.empty()) return dispatch::algo_mode_from_name(flag);
  if (const char* env = std::getenv("EMBER_ALGO_MODE"); env && *env) return std::nullopt;
  if (device.is_cuda()) return dispatch::AlgoMode::benchmark;
  return std::nullopt;
}

}  // namespace ember::examples
