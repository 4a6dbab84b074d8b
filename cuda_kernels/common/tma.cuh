// sm_90 asynchronous-copy pipelines: shared-memory barriers (mbarrier) that count the copies
// landing in a shared-memory stage and hand stages between warps (the softmax ring's TMA slots,
// the warp-specialized convolution's full/empty stages), and bulk copies (TMA) of global memory
// into shared memory that complete on such a barrier. `bar` and `dst` are shared-memory addresses
// (shared_address). Include only from .cu files, and call only from code built for sm_90 or later.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// ---- shared-memory barriers ---------------------------------------------------------------------

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

// ---- bulk copies into shared memory (TMA) -------------------------------------------------------
// A barrier counts a copy's arrival: the issuing thread arrives once and declares the bytes to
// expect, the TMA engine completes the phase when they have landed, and a waiter spins on the
// phase's parity (0, 1, 0, ... for successive uses).

// The shared-memory address of a generic pointer into shared memory.

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// After mbarrier_init of the slots' barriers, bulk_barrier_init_fence() makes them visible to the
// TMA engine (the async proxy), and the block synchronizes before another thread uses them.
__device__ __forceinline__ void bulk_barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// An L2 policy for data read once: its lines are evicted first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Orders this thread's view of shared memory (and what a block barrier made visible to it: other
// threads' reads of a buffer) before the bulk copies it starts next, which write through the
// async proxy: a buffer is refilled only after everyone's reads of it.
__device__ __forceinline__ void bulk_refill_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared
// `dst`; the phase of `bar` in progress completes when they have landed.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar, uint64_t policy) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

}  // namespace ember::cuda
