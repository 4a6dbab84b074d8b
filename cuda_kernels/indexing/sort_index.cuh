// Sorting an index tensor stably together with its positions (CUB radix sort), shared by the
// deterministic accumulation kernels of cuda_kernels/indexing/ (index_add, embedding_bag's
// backward): after the sort, each run of equal indices lists its positions in increasing order.
#pragma once
#include <cub/device/device_radix_sort.cuh>

#include "ember/cuda_kernels/indexing/indexing_common.cuh"
#include "ember/tensor/tensor.h"

namespace ember::cuda {
namespace {

__global__ void widen_index_kernel(int64_t* keys, int64_t* positions, const void* index,
                                   bool index_is_i64, int64_t nidx) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nidx; i += step) {
    keys[i] = load_index(index, index_is_i64, i);
    positions[i] = i;
  }
}

// The index sorted stably with its positions: returns {sorted index, positions} (int64 each) in
// one workspace tensor that must stay alive until the kernels that read it have run.
Tensor sort_index_with_positions(const Tensor& index, cudaStream_t stream, int64_t*& sorted_index,
                                 int64_t*& sorted_positions) {
  const int64_t nidx = index.numel();
  size_t sort_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int64_t*)nullptr,
                                                   (int64_t*)nullptr, (const int64_t*)nullptr,
                                                   (int64_t*)nullptr, nidx, 0, 64, stream));
  const int64_t words = 4 * nidx;
  Tensor workspace =
      empty({int64_t(words * 8 + int64_t(sort_bytes) + 16)}, DType::u8, index.device());
  int64_t* base = static_cast<int64_t*>(workspace.data_ptr());
  int64_t *keys = base, *positions = base + nidx;
  sorted_index = base + 2 * nidx;
  sorted_positions = base + 3 * nidx;
  widen_index_kernel<<<grid_for(nidx, index.device().index), kBlockThreads, 0, stream>>>(
      keys, positions, index.data_ptr(), index.dtype() == DType::i64, nidx);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + words, sort_bytes, keys, sorted_index,
                                                   positions, sorted_positions, nidx, 0, 64,
                                                   stream));
  return workspace;
}

}  // namespace
}  // namespace ember::cuda
