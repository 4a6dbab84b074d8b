// hold_stream: a kernel that keeps a stream busy for a while, so that work the host enqueues
// behind it meanwhile runs back to back on the GPU. The algorithm cache's benchmark
// (dispatch/algo_cache_benchmark.cpp, through the hook cuda_kernels/common/timing_hooks.cpp
// registers) starts its timed runs behind one, so its events measure GPU time alone: without it a
// short problem is timed at the host's launch rate and algorithms are ranked by how many kernels
// they launch.
#pragma once
#include <cuda_runtime_api.h>

namespace ember::cuda {

// Enqueues on `stream` a one-thread kernel that returns after `microseconds` of GPU time.
void hold_stream(cudaStream_t stream, double microseconds);

}  // namespace ember::cuda
