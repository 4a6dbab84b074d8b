// Programmatic dependent launch (sm_90): a kernel launched with launch_dependent may be scheduled
// while the kernel before it on the stream is still finishing, so its launch and block placement
// overlap that kernel's tail instead of following it. Such a kernel must call
// wait_for_prior_grid() before it touches global memory (it returns once the kernel before it has
// completed and its writes are visible), and may call allow_dependents() to let the next
// dependent launch be scheduled early. Both are no-ops before sm_90 and when launched normally.
// Users: the batch-norm kernels, launched dependent (the statistics, finalize and apply kernels,
// the backward's sums, finalize and elementwise kernels each follow one another); the implicit
// GEMM convolutions, which allow dependents (the batch norm after a convolution); the pooling fast
// paths (cuda_kernels/pooling/pooling_nhwc.cu: window and global-average kernels). Chains of
// short kernels gain most: the batch-norm calls and the graphed step that runs them
// (docs/perf-notes.md, "Normalization").
// Works in stream capture (the graph keeps the programmatic edge). Include only from .cu files.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "ember/tensor/runtime/cuda_check.h"

namespace ember::cuda {

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace ember::cuda
