// examples/common: how the example programs choose their algorithms (--algo-mode). A GPU run uses
// the algorithm cache's adaptive mode unless told otherwise: like PyTorch's
// torch.backends.cudnn.benchmark = True it times candidates per new shape, but only the cost
// model's top few, within a timing budget, and a new shape near one already timed (its size class)
// borrows that choice until its own turn comes, so training with varying shapes pays no
// benchmarking storm (docs/dispatch.md, "Adaptive mode"; EMBER_ALGO_CACHE=FILE keeps the timed
// choices across runs). A CPU run keeps the cost model (heuristic mode). Training loops call
// algo_step_boundary() after each step, which lets entries still awaiting their timing be timed.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"

namespace ember::examples {

constexpr const char* kAlgoModeHelp =
    "adaptive (time the cost model's top candidates per new shape within a budget, borrowing the "
    "choice of a nearby timed shape meanwhile; the default on a GPU), benchmark (time every "
    "candidate once per shape), heuristic (cost model, no timing; the default on the CPU) or "
    "deterministic; EMBER_ALGO_MODE also sets it";

// The mode for a run on `device`: `flag` (--algo-mode; an unknown name is algo_mode_from_name's
// error) when given, else none (the process-wide settings, which EMBER_ALGO_MODE initialises)
// when EMBER_ALGO_MODE is set or on the CPU, else adaptive.
inline std::optional<dispatch::AlgoMode> algo_mode_for(const std::string& flag, Device device) {
  if (!flag.empty()) return dispatch::algo_mode_from_name(flag);
  if (const char* env = std::getenv("EMBER_ALGO_MODE"); env && *env) return std::nullopt;
  if (device.is_cuda()) return dispatch::AlgoMode::adaptive;
  return std::nullopt;
}

// At the end of a training step: in adaptive mode, lets the algorithm choices still borrowed or
// made by the heuristic be timed at their next use, within one step's timing budget
// (AlgoCache::tune_pending). Nothing in other modes.
inline void algo_step_boundary() {
  if (dispatch::current_algo_settings().mode == dispatch::AlgoMode::adaptive)
    dispatch::algo_cache().tune_pending();
}

}  // namespace ember::examples
