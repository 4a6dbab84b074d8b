// The stream-holding kernel of cuda_kernels/common/stream_hold.h.
#include <cstdint>

#include "ember/cuda_kernels/common/stream_hold.h"
#include "ember/tensor/runtime/cuda_check.h"

namespace ember::cuda {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Polls the global nanosecond timer, sleeping between polls, until `ns` have passed.
__global__ void hold_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

void hold_stream(cudaStream_t stream, double microseconds) {
  const uint64_t ns = microseconds > 0 ? uint64_t(microseconds * 1000.0) : 0;
  hold_kernel<<<1, 1, 0, stream>>>(ns);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace ember::cuda
