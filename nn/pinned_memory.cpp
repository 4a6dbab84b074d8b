// The pinned host-memory cache of nn/pinned_memory.h: cudaHostAlloc blocks in power-of-two size
// classes, handed out again when their tensor dies, never returned to the driver.
#include "ember/nn/pinned_memory.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "ember/tensor/runtime/cuda_device.h"

#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember::data {

namespace {

#ifdef EMBER_WITH_CUDA
struct PinnedCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;  // size class -> block
  std::unordered_map<void*, size_t> live;    // block -> size class
  PinnedMemoryStats stats;
};

// Never destroyed: tensors freed by other static destructors at exit may still come back to it.
PinnedCache& cache() {
  static PinnedCache* instance = new PinnedCache();
  return *instance;
}

// Smallest power of two >= nbytes, at least one page, so that batches of one shape share a class.
size_t size_class(size_t nbytes) {
  size_t size = 4096;
  while (size < nbytes) size *= 2;
  return size;
}

void release_pinned(void* ptr) {
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.live.find(ptr);
  if (it == c.live.end()) return;  // cannot happen: every block we hand out is in `live`
  c.stats.in_use_bytes -= it->second;
  c.stats.cached_bytes += it->second;
  c.free_blocks.emplace(it->second, ptr);
  c.live.erase(it);
}

void* acquire_pinned(size_t nbytes) {
  const size_t cls = size_class(nbytes);
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  void* ptr = nullptr;
  auto it = c.free_blocks.find(cls);
  if (it != c.free_blocks.end()) {
    ptr = it->second;
    c.free_blocks.erase(it);
    c.stats.cached_bytes -= cls;
  } else {
    EMBER_CUDA_CHECK(cudaHostAlloc(&ptr, cls, cudaHostAllocPortable));
    ++c.stats.num_host_allocs;
  }
  c.live.emplace(ptr, cls);
  c.stats.in_use_bytes += cls;
  return ptr;
}
#endif

}  // namespace

Tensor empty_pinned(const Shape& sizes, DType dtype) {
#ifdef EMBER_WITH_CUDA
  if (cuda::is_available()) {
    for (int64_t d : sizes)
      EMBER_CHECK(d >= 0, "empty_pinned: negative size in ", shape_str(sizes));
    const size_t nbytes = size_t(shape_numel(sizes)) * element_size(dtype);
    void* ptr = acquire_pinned(nbytes);
    auto impl = std::make_shared<TensorImpl>();
    impl->storage =
        std::make_shared<StorageImpl>(DataPtr{ptr, &release_pinned}, nbytes, Device::cpu());
    impl->sizes = sizes;
    impl->strides = contiguous_strides(sizes);
    impl->dtype = dtype;
    return Tensor(std::move(impl));
  }
#endif
  return empty(sizes, dtype, Device::cpu());
}

bool is_pinned(const Tensor& t) {
#ifdef EMBER_WITH_CUDA
  if (!t.defined() || !t.storage()) return false;
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.live.count(t.storage()->data.ptr) != 0;
#else
  (void)t;
  return false;
#endif
}

PinnedMemoryStats pinned_memory_stats() {
#ifdef EMBER_WITH_CUDA
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
#else
  return {};
#endif
}

}  // namespace ember::data
