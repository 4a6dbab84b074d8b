// Shared-memory barriers (mbarrier, sm_90) through which pipelines count the asynchronous copies
// landing in a shared-memory stage and hand stages between warps: the softmax ring's TMA slots
// and the warp-specialized convolution's full/empty stages. `bar` is the barrier's shared-memory
// address. Include only from .cu files, and call only from code built for sm_90 or later.
#pragma once
#include <cstdint>

namespace ember::cuda {

// Initializes `bar` for `arrivals` arrivals per phase.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// One arrival on `bar`.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Blocks until the phase of `bar` with this parity has completed (what its arrivals, and the
// copies they counted, wrote to shared memory is then visible to the waiting thread).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace ember::cuda
