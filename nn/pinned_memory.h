// Page-locked ("pinned") host memory for the data loader: host tensors whose copies to a GPU are
// truly asynchronous (cudaMemcpyAsync from pageable memory stages through a driver buffer and
// returns only when the source has been read). Blocks come from cudaHostAlloc and are cached by
// size class, never freed while the process runs (cudaFreeHost would synchronize the device), so
// steady-state batches reuse the same few blocks.
//
// The cache hands a block out again as soon as its tensor is destroyed: a caller that starts an
// asynchronous copy from a pinned tensor keeps the tensor alive until the copy has finished (the
// DataLoader holds each batch's host tensors until an event recorded after its copy has passed).
//
// Without a GPU (a CPU-only build, or no visible device) pinned tensors are ordinary host tensors.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ember/tensor/tensor.h"

namespace ember::data {

// A contiguous CPU tensor in pinned memory (ordinary memory without a GPU).
Tensor empty_pinned(const Shape& sizes, DType dtype);
// True when t's storage is a block of the pinned cache.
bool is_pinned(const Tensor& t);

// Counters of the pinned host memory cache (what empty_pinned draws from).
struct PinnedMemoryStats {
  size_t in_use_bytes = 0;       // blocks held by live tensors (rounded up to size classes)
  size_t cached_bytes = 0;       // blocks waiting for reuse
  uint64_t num_host_allocs = 0;  // cudaHostAlloc calls so far
};
// The cache's counters now (all zero in a build without CUDA).
PinnedMemoryStats pinned_memory_stats();

}  // namespace ember::data
