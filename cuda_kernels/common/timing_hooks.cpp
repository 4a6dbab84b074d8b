// The CUDA backend's benchmark hooks (dispatch/benchmark_hooks.h), registered at library load: the
// AlgoCache times CUDA candidates behind hold_stream (cuda_kernels/common/stream_hold.h) and runs
// again a warm-up that eager replay spent recording or capturing (eager_replay_setup_events).
#include <cuda_runtime_api.h>

#include "ember/cuda_kernels/common/stream_hold.h"
#include "ember/dispatch/benchmark_hooks.h"
#include "ember/tensor/runtime/eager_replay.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::cuda {
namespace {

void hold_current(const Stream& stream, double microseconds) {
  hold_stream(static_cast<cudaStream_t>(stream.handle), microseconds);
}

const bool timing_hooks_registered = [] {
  dispatch::BenchmarkHooks hooks;
  hooks.hold_stream = &hold_current;
  hooks.setup_events = &eager_replay_setup_events;
  dispatch::set_benchmark_hooks(DeviceType::CUDA, hooks);
  return true;
}();

}  // namespace
}  // namespace ember::cuda
