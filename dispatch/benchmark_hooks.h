// Benchmark hooks: what a backend lends the AlgoCache's timing of candidates
// (dispatch/algo_cache_benchmark.cpp), so that dispatch includes no kernel and no backend. A
// backend registers its hooks for its device type at library load (the CUDA backend's are in
// cuda_kernels/common/timing_hooks.cpp); a device type without hooks is timed without them.
#pragma once
#include <cstdint>

#include "ember/tensor/device.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::dispatch {

struct BenchmarkHooks {
  // Enqueues on `stream` work that keeps it busy for `microseconds`, so that the runs the host
  // enqueues meanwhile go back to back and the timing events measure the device alone, not the
  // host's launch rate. Null: runs are timed at the host's pace.
  void (*hold_stream)(const Stream& stream, double microseconds) = nullptr;
  // How many times the calling thread has done one-time host work so far that a later identical
  // call skips (eager replay recording or capturing a graph, tensor/runtime/eager_replay.h): a run
  // that changes it was no warm-up and is run again. Null: never.
  int64_t (*setup_events)() = nullptr;
};

// Registers the hooks of `device_type`, replacing earlier ones (default hooks remove them).
void set_benchmark_hooks(DeviceType device_type, const BenchmarkHooks& hooks);
// The hooks registered for `device_type`; null members where none is.
BenchmarkHooks benchmark_hooks(DeviceType device_type);

}  // namespace ember::dispatch
