// cp.async (sm_80+): 16-byte copies from global to shared memory that run asynchronously to the
// issuing thread, in commit groups it can wait for. Users: the implicit-GEMM convolutions' tile
// pipelines and the single-read batch-norm forward (its wave of x held in shared memory).
// Include only from .cu files.
#pragma once
#include <cstdint>

namespace ember::cuda {

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (nothing is read then).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
// Closes the group of the copies this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight; what the finished
// groups wrote is then visible to this thread (no compiler memory barrier: callers read the data
// after a __syncthreads()).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace ember::cuda
