// The CUDA caching allocator (the core's allocate() reaches it for CUDA devices), a stream-aware
// allocator: blocks freed on a stream are reused by that stream without
// cudaFree, a block used on another stream is recorded there (record_stream) so it is not reused
// early, captured graphs allocate from private pools, and out-of-memory releases the cache, retries
// and then throws alloc_failed saying what was asked, what is in use and what is cached.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/tensor/allocator.h"
#include "ember/tensor/device.h"
#include "ember/tensor/runtime/stream.h"

namespace ember {

struct MemoryStats {
  size_t allocated_bytes = 0;       // in tensors now
  size_t reserved_bytes = 0;        // held from the driver (allocated + cached)
  size_t peak_allocated_bytes = 0;  // since the last reset
  uint64_t num_driver_allocs = 0;   // cudaMalloc calls so far
  uint64_t num_driver_frees = 0;
  uint64_t num_alloc_retries = 0;  // times the cache was released to satisfy a request
  uint64_t num_ooms = 0;
};

namespace cuda {
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
// Returns cached, unused blocks to the driver (never during a capture).
void empty_cache();
// Marks that `ptr` (from the caching allocator) is used on `stream`: its block is not reused until
// the work queued on `stream` so far has finished.
void record_stream(void* ptr, const Stream& stream);

// Private pools: while a MemPoolScope is alive on this thread, CUDA allocations on `device` come
// from (and frees return to) pool `id`, never shared with ordinary allocations. Graph capture uses
// one pool per graph (or one shared by graphs replayed in a fixed order).
using MemPoolId = uint64_t;
MemPoolId new_mem_pool_id();
class MemPoolScope {
 public:
  MemPoolScope(int device, MemPoolId id);
  ~MemPoolScope();
  MemPoolScope(const MemPoolScope&) = delete;
  MemPoolScope& operator=(const MemPoolScope&) = delete;

 private:
  int device_;
  MemPoolId prev_;
};
// Frees the cached blocks of a private pool whose graphs are gone.
void release_mem_pool(int device, MemPoolId id);
}  // namespace cuda

}  // namespace ember
