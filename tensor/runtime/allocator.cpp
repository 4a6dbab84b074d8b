// The CUDA caching allocator (the CPU allocator is the core's: tensor/allocator.cpp).
//
// The CUDA allocator keeps memory it got from cudaMalloc ("segments") and carves blocks out of it,
// like PyTorch's CUDACachingAllocator:
//  - sizes round up to 512 B; requests up to 1 MiB come from the small pool (2 MiB segments),
//  larger
//    ones from the large pool (a 20 MiB segment shared by requests under 10 MiB, else a segment of
//    the request rounded up to 2 MiB). Blocks split on allocation and merge with free neighbours of
//    the same segment when freed, so a steady-state training step never calls cudaMalloc/cudaFree.
//  - a block belongs to the stream it was allocated on: freeing it is ordered on that stream, so
//    only that stream reuses it. record_stream adds other streams that use it; at free time an
//    event is recorded on each, and the block becomes reusable once all have completed (queried
//    without blocking at later allocations).
//  - MemPoolScope routes a thread's allocations on a device to a private pool (one per captured
//    graph): separate free lists, blocks return to their own pool, release_mem_pool frees them.
//  - out of memory: synchronize, return every cached unused segment to the driver, retry once,
//    then throw alloc_failed saying what was asked, what is allocated and what is reserved.
// One mutex per device. Deleters are plain function pointers, one instantiated per device index,
// so a free finds its device without a global lock and its block through that device's hash map.
#include "ember/tensor/runtime/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_device.h"

#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember {

namespace {

[[maybe_unused]] std::string format_mib(size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", double(bytes) / double(1 << 20));
  return text;
}

// ---- private pool selection (per thread, per device)
// ----------------------------------------------

// Private pools in use anywhere in the process. While any is alive a graph capture may be underway
// (captures allocate under a MemPoolScope), and during a capture the allocator must not query
// events, synchronize or cudaFree: those calls would invalidate the capture.
std::atomic<int> g_active_pool_scopes{0};
thread_local std::vector<cuda::MemPoolId> tls_pool_ids;  // per device; 0 = the default pool

[[maybe_unused]] cuda::MemPoolId current_pool_id(int device) {
  return size_t(device) < tls_pool_ids.size() ? tls_pool_ids[size_t(device)] : 0;
}

}  // namespace

#ifdef EMBER_WITH_CUDA

namespace {

constexpr size_t kMinBlockSize = 512;         // every block size is a multiple of this
constexpr size_t kSmallRequest = 1u << 20;    // requests up to 1 MiB use the small pool
constexpr size_t kSmallSegment = 2u << 20;    // segment size of the small pool
constexpr size_t kMinLargeAlloc = 10u << 20;  // large requests below this share ...
constexpr size_t kLargeSegment = 20u << 20;   // ... a segment of this size
constexpr size_t kLargeRound = 2u << 20;      // larger requests get their own, rounded to this
constexpr size_t kMaxRequest = SIZE_MAX / 2;  // beyond this the rounding would overflow
constexpr int kMaxCudaDevices = 64;           // deleters are instantiated per device index

struct BlockPool;
struct MemPool;

enum class BlockState : uint8_t {
  allocated,
  free,           // in its pool's free set, may merge with neighbours
  awaiting_uses,  // freed by the tensor, but streams recorded with record_stream may still use it
};

// A piece of a segment. Neighbours within the segment are linked so frees can merge them.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // the stream it was allocated on; only that stream reuses it
  BlockPool* pool = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  BlockState state = BlockState::free;
  std::vector<cudaStream_t> stream_uses;  // other streams recorded with record_stream

  bool is_whole_segment() const { return prev == nullptr && next == nullptr; }
};

// Free blocks ordered by (stream, size, address): lower_bound finds the smallest block of the
// stream that fits.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream)
      return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

struct BlockPool {
  std::set<Block*, BlockLess> free_blocks;
  MemPool* owner = nullptr;
  bool small = false;
};

// The default pool (id 0) or a private pool.
struct MemPool {
  explicit MemPool(cuda::MemPoolId pool_id) : id(pool_id) {}
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  cuda::MemPoolId id;
  BlockPool small_blocks{{}, this, true};
  BlockPool large_blocks{{}, this, false};
  size_t num_segments = 0;
  bool released = false;  // release_mem_pool was called: its free segments may go to the driver
};

// A freed block waiting for the events recorded on its other streams.
struct PendingUses {
  Block* block = nullptr;
  std::vector<cudaEvent_t> events;
};

size_t round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize
                                : (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size_for(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// Whether `stream` is being captured. An error (the legacy stream during another thread's
// capture) counts as "capturing": the caller then takes the path that is legal during a capture.
bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

bool capture_may_be_underway(cudaStream_t stream) {
  return g_active_pool_scopes.load(std::memory_order_relaxed) > 0 || stream_is_capturing(stream);
}

cudaError_t driver_malloc(void** ptr, size_t bytes, bool capturing) {
  cudaError_t err;
  if (capturing) {
    // Legal in relaxed mode: the graph gets the address, replays do not allocate again, and the
    // segment is never freed while the graph's pool lives.
    cuda::RelaxedCaptureModeGuard relaxed;
    err = cudaMalloc(ptr, bytes);
  } else {
    err = cudaMalloc(ptr, bytes);
  }
  // Out of memory is handled here, not by the next launch check: clear the runtime's last error.
  if (err == cudaErrorMemoryAllocation) (void)cudaGetLastError();
  return err;
}

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {
    pools_.emplace(0, std::make_unique<MemPool>(0));
  }
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  void* malloc(size_t nbytes, cudaStream_t stream, cuda::MemPoolId pool_id) {
    std::lock_guard lock(mutex_);
    if ((!pending_.empty() || !deferred_.empty()) && !capture_may_be_underway(stream)) {
      record_deferred_uses();
      process_pending_uses();
    }
    if (nbytes > kMaxRequest) {
      ++stats_.num_ooms;
      throw_out_of_memory(nbytes, "");
    }
    const size_t size = round_size(nbytes);
    MemPool& mem_pool = pool(pool_id);
    mem_pool.released = false;  // allocating into a pool means it is in use again
    BlockPool& blocks = size <= kSmallRequest ? mem_pool.small_blocks : mem_pool.large_blocks;
    Block* block = take_free_block(blocks, stream, size);
    if (block == nullptr) block = new_segment(blocks, stream, size, nbytes);
    split(block, size);
    block->state = BlockState::allocated;
    allocated_.emplace(block->ptr, block);
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return block->ptr;
  }

  void free(void* ptr) {
    std::lock_guard lock(mutex_);
    auto it = allocated_.find(ptr);
    EMBER_INTERNAL_ASSERT(it != allocated_.end(), "CUDA caching allocator on cuda:", device_,
                          ": free of ", ptr, ", which it did not allocate or already freed");
    Block* block = it->second;
    allocated_.erase(it);
    stats_.allocated_bytes -= block->size;
    if (block->stream_uses.empty()) {
      release_block(block);
      return;
    }
    block->state = BlockState::awaiting_uses;
    if (uses_may_be_captured(*block)) {
      // Events recorded now would become part of a graph; record them once the capture is over.
      deferred_.push_back(block);
      return;
    }
    record_uses(block);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    auto it = allocated_.find(ptr);
    EMBER_CHECK(
        it != allocated_.end(), "record_stream: ", ptr,
        " is not the start of a live block of Ember's CUDA caching allocator on cuda:", device_,
        "; pass the storage's base pointer (tensor.storage()->data.ptr) of a "
        "tensor on the stream's device");
    Block* block = it->second;
    if (stream == block->stream) return;  // ordered by the allocating stream already
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) ==
        block->stream_uses.end())
      block->stream_uses.push_back(stream);
  }

  MemoryStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

  bool ever_used() {
    std::lock_guard lock(mutex_);
    return stats_.num_driver_allocs > 0;
  }

  // Returns the unused segments of the default pool and of released private pools to the driver.
  // The caller has checked that no capture is underway.
  void empty_cache() {
    std::lock_guard lock(mutex_);
    synchronize_and_settle_uses();
    free_unused_segments([](const MemPool& p) { return p.id == 0 || p.released; });
  }

  void release_pool(cuda::MemPoolId id, cudaStream_t current) {
    std::lock_guard lock(mutex_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;  // never used on this device, or already gone
    it->second->released = true;
    // During a capture the segments stay cached; empty_cache or an out-of-memory retry frees them
    // later (both free released pools).
    if (capture_may_be_underway(current)) return;
    synchronize_and_settle_uses();  // the pool's last graph replay may still be running
    free_unused_segments([id](const MemPool& p) { return p.id == id; });
  }

 private:
  MemPool& pool(cuda::MemPoolId id) {
    auto it = pools_.find(id);
    if (it == pools_.end()) it = pools_.emplace(id, std::make_unique<MemPool>(id)).first;
    return *it->second;
  }

  static Block* take_free_block(BlockPool& blocks, cudaStream_t stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = blocks.free_blocks.lower_bound(&key);
    if (it == blocks.free_blocks.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    blocks.free_blocks.erase(it);
    return block;
  }

  // Cuts `block` (not in a free set) to `size`, putting the rest back as a free block, unless the
  // rest is too small to be worth tracking (it then stays part of the block).
  static void split(Block* block, size_t size) {
    const size_t remaining = block->size - size;
    const bool worth_it =
        block->pool->small ? remaining >= kMinBlockSize : remaining > kSmallRequest;
    if (!worth_it) return;
    auto* rest = new Block;
    rest->ptr = block->ptr + size;
    rest->size = remaining;
    rest->stream = block->stream;
    rest->pool = block->pool;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    rest->state = BlockState::free;
    block->pool->free_blocks.insert(rest);
  }

  // Makes `block` free again, merged with free neighbours of its segment.
  static void release_block(Block* block) {
    BlockPool& blocks = *block->pool;
    block->state = BlockState::free;
    if (Block* prev = block->prev; prev != nullptr && prev->state == BlockState::free) {
      blocks.free_blocks.erase(prev);
      block->ptr = prev->ptr;
      block->size += prev->size;
      block->prev = prev->prev;
      if (block->prev != nullptr) block->prev->next = block;
      delete prev;
    }
    if (Block* next = block->next; next != nullptr && next->state == BlockState::free) {
      blocks.free_blocks.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next != nullptr) block->next->prev = block;
      delete next;
    }
    blocks.free_blocks.insert(block);
  }

  Block* new_segment(BlockPool& blocks, cudaStream_t stream, size_t size, size_t nbytes) {
    const bool capturing = stream_is_capturing(stream);
    EMBER_CHECK_STATUS(
        !capturing || blocks.owner->id != 0, not_supported, "CUDA allocation of ", nbytes,
        " bytes on cuda:", device_,
        " during a CUDA graph capture needs new memory from the "
        "driver: the cache has no free block of that size for the capturing stream. Warm up first "
        "(run the captured step eagerly once so the cache holds the blocks it needs), or capture "
        "under an ember::cuda::MemPoolScope so the graph gets a private pool");
    const size_t segment_size = segment_size_for(size);
    DeviceGuard on_device(Device::cuda(device_));  // cudaMalloc allocates on the current device
    void* ptr = nullptr;
    cudaError_t err = driver_malloc(&ptr, segment_size, capturing);
    const bool can_release = !capture_may_be_underway(stream);
    if (err == cudaErrorMemoryAllocation && can_release) {
      ++stats_.num_alloc_retries;
      synchronize_and_settle_uses();
      free_unused_segments([](const MemPool& p) { return p.id == 0 || p.released; });
      err = driver_malloc(&ptr, segment_size, capturing);
    }
    if (err == cudaErrorMemoryAllocation) {
      ++stats_.num_ooms;
      throw_out_of_memory(nbytes, can_release ? ""
                                              : " (the cache was not released because a CUDA "
                                                "graph capture may be underway)");
    }
    if (err != cudaSuccess) cuda::detail::throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    ++stats_.num_driver_allocs;
    stats_.reserved_bytes += segment_size;
    ++blocks.owner->num_segments;
    auto* block = new Block;
    block->ptr = static_cast<char*>(ptr);
    block->size = segment_size;
    block->stream = stream;
    block->pool = &blocks;
    return block;
  }

  [[noreturn]] void throw_out_of_memory(size_t nbytes, const char* note) {
    DeviceGuard on_device(Device::cuda(device_));
    size_t free_bytes = 0, total_bytes = 0;
    std::string capacity;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      capacity = ::ember::detail::concat(" (cuda:", device_, " has ", format_mib(total_bytes),
                                         " MiB in total, ", format_mib(free_bytes), " MiB free)");
    else
      (void)cudaGetLastError();
    EMBER_THROW(alloc_failed, "CUDA out of memory on cuda:", device_, ": tried to allocate ",
                format_mib(nbytes), " MiB; ", format_mib(stats_.allocated_bytes),
                " MiB allocated by tensors, ", format_mib(stats_.reserved_bytes),
                " MiB reserved (cached); free memory by dropping tensors or lower the batch size",
                capacity, note);
  }

  bool uses_may_be_captured(const Block& block) const {
    if (capture_may_be_underway(block.stream)) return true;
    return std::any_of(block.stream_uses.begin(), block.stream_uses.end(), stream_is_capturing);
  }

  cudaEvent_t take_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
    DeviceGuard on_device(
        Device::cuda(device_));  // events belong to the device current at creation
    cudaEvent_t event = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  // Marks the end of the work queued so far on each recorded stream of `block`.
  void record_uses(Block* block) {
    PendingUses pending{block, {}};
    for (cudaStream_t stream : block->stream_uses) {
      cudaEvent_t event = take_event();
      pending.events.push_back(event);
      EMBER_CUDA_CHECK(cudaEventRecord(event, stream));
    }
    block->stream_uses.clear();
    pending_.push_back(std::move(pending));
  }

  void record_deferred_uses() {
    std::vector<Block*> deferred;
    deferred.swap(deferred_);
    for (Block* block : deferred) record_uses(block);
  }

  // Frees (to their pools) the blocks whose recorded streams have all passed their events.
  void process_pending_uses() {
    for (size_t i = 0; i < pending_.size();) {
      PendingUses& pending = pending_[i];
      while (!pending.events.empty()) {
        const cudaError_t err = cudaEventQuery(pending.events.back());
        if (err == cudaErrorNotReady) {
          (void)cudaGetLastError();  // an answer, not a failure
          break;
        }
        EMBER_CUDA_CHECK(err);
        spare_events_.push_back(pending.events.back());
        pending.events.pop_back();
      }
      if (pending.events.empty()) {
        release_block(pending.block);
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }

  // After a device-wide sync every recorded use has finished: free all waiting blocks.
  void synchronize_and_settle_uses() {
    DeviceGuard on_device(Device::cuda(device_));
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    for (PendingUses& pending : pending_) {
      spare_events_.insert(spare_events_.end(), pending.events.begin(), pending.events.end());
      release_block(pending.block);
    }
    pending_.clear();
    for (Block* block : deferred_) {
      block->stream_uses.clear();
      release_block(block);
    }
    deferred_.clear();
  }

  // cudaFree's every whole, free segment of the pools `selected` picks; drops released private
  // pools left with no segment. Call with the device synchronized and no capture underway.
  template <typename Selector>
  void free_unused_segments(Selector selected) {
    DeviceGuard on_device(Device::cuda(device_));
    for (auto it = pools_.begin(); it != pools_.end();) {
      MemPool& mem_pool = *it->second;
      if (selected(mem_pool)) {
        for (BlockPool* blocks : {&mem_pool.small_blocks, &mem_pool.large_blocks}) {
          for (auto b = blocks->free_blocks.begin(); b != blocks->free_blocks.end();) {
            Block* block = *b;
            if (!block->is_whole_segment()) {
              ++b;
              continue;
            }
            EMBER_CUDA_CHECK(cudaFree(block->ptr));
            ++stats_.num_driver_frees;
            stats_.reserved_bytes -= block->size;
            --mem_pool.num_segments;
            b = blocks->free_blocks.erase(b);
            delete block;
          }
        }
      }
      if (mem_pool.id != 0 && mem_pool.released && mem_pool.num_segments == 0)
        it = pools_.erase(it);
      else
        ++it;
    }
  }

  const int device_;
  std::mutex mutex_;
  std::unordered_map<cuda::MemPoolId, std::unique_ptr<MemPool>> pools_;  // 0: the default pool
  std::unordered_map<void*, Block*> allocated_;
  std::vector<PendingUses> pending_;  // freed, waiting for events on recorded streams
  std::vector<Block*> deferred_;      // freed during a possible capture, events not yet recorded
  std::vector<cudaEvent_t> spare_events_;
  MemoryStats stats_;
};

// One allocator per visible GPU, made on first use and never destroyed: tensors freed by static
// destructors at exit still find their allocator.
DeviceAllocator& device_allocator(int device) {
  static DeviceAllocator** allocators = [] {
    const int count = cuda::device_count();
    EMBER_CHECK_STATUS(count <= kMaxCudaDevices, not_supported,
                       "the CUDA caching allocator "
                       "supports up to ",
                       kMaxCudaDevices, " GPUs per process, but ", count,
                       " are visible; restrict them with CUDA_VISIBLE_DEVICES");
    auto** all = new DeviceAllocator*[size_t(count)];
    for (int i = 0; i < count; ++i) all[i] = new DeviceAllocator(i);
    return all;
  }();
  return *allocators[device];
}

void free_cuda_block(int device, void* ptr) noexcept {
  // Runs in Storage's destructor: report, never throw.
  try {
    device_allocator(device).free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: freeing CUDA memory %p on cuda:%d failed: %s\n", ptr, device,
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "ember: freeing CUDA memory %p on cuda:%d failed\n", ptr, device);
  }
}

template <int kDevice>
void cuda_block_deleter(void* ptr) noexcept {
  free_cuda_block(kDevice, ptr);
}

template <size_t... I>
constexpr std::array<Deleter, sizeof...(I)> make_cuda_deleters(std::index_sequence<I...>) {
  return {{&cuda_block_deleter<int(I)>...}};
}

constexpr std::array<Deleter, kMaxCudaDevices> kCudaDeleters =
    make_cuda_deleters(std::make_index_sequence<kMaxCudaDevices>{});

cudaStream_t current_cuda_stream(int device) {
  return static_cast<cudaStream_t>(current_stream(Device::cuda(device)).handle);
}

}  // namespace

#endif  // EMBER_WITH_CUDA

#ifdef EMBER_WITH_CUDA
namespace {
DataPtr allocate_cuda(size_t nbytes, Device device) {
  cuda::check_device(device);
  if (nbytes == 0) return {};
  void* ptr = device_allocator(device.index)
                  .malloc(nbytes, current_cuda_stream(device.index), current_pool_id(device.index));
  return {ptr, kCudaDeleters[size_t(device.index)]};
}
// The core's allocate() reaches the caching allocator through this registration.
const bool cuda_allocator_registered = [] {
  register_device_allocator(DeviceType::CUDA, &allocate_cuda);
  return true;
}();
}  // namespace
#endif

namespace cuda {

MemoryStats memory_stats(int device) {
  check_device(Device::cuda(device));
#ifdef EMBER_WITH_CUDA
  return device_allocator(device).stats();
#else
  return {};
#endif
}

void reset_peak_memory_stats(int device) {
  check_device(Device::cuda(device));
#ifdef EMBER_WITH_CUDA
  device_allocator(device).reset_peak();
#endif
}

void empty_cache() {
  // Nothing is cached without a GPU.
  if (!is_available()) return;
#ifdef EMBER_WITH_CUDA
  EMBER_CHECK(g_active_pool_scopes.load() == 0,
              "empty_cache: a MemPoolScope is alive, so a CUDA "
              "graph capture may be underway, and freeing memory now would invalidate it; call "
              "empty_cache after the capture and outside any MemPoolScope");
  for (int device = 0; device < device_count(); ++device) {
    DeviceAllocator& allocator = device_allocator(device);
    if (!allocator.ever_used()) continue;  // do not wake up GPUs this process never used
    EMBER_CHECK(!stream_is_capturing(current_cuda_stream(device)),
                "empty_cache: the current "
                "stream of cuda:",
                device,
                " is being captured as a CUDA graph; freeing memory "
                "now would invalidate the capture; call empty_cache after it ends");
    allocator.empty_cache();
  }
#endif
}

void record_stream(void* ptr, const Stream& stream) {
  if (ptr == nullptr || stream.device.is_cpu()) return;  // empty tensors and CPU: nothing to track
  check_device(stream.device);
#ifdef EMBER_WITH_CUDA
  device_allocator(stream.device.index)
      .record_stream(ptr, static_cast<cudaStream_t>(stream.handle));
#endif
}

MemPoolId new_mem_pool_id() {
  static std::atomic<MemPoolId> next_id{1};  // 0 is the default pool
  return next_id.fetch_add(1, std::memory_order_relaxed);
}

MemPoolScope::MemPoolScope(int device, MemPoolId id) : device_(device), prev_(0) {
  check_device(Device::cuda(device));
  EMBER_CHECK(id != 0,
              "MemPoolScope: pool id 0 is the default pool; get a private pool id from "
              "ember::cuda::new_mem_pool_id()");
  if (tls_pool_ids.size() <= size_t(device)) tls_pool_ids.resize(size_t(device_count()), 0);
  prev_ = tls_pool_ids[size_t(device)];
  tls_pool_ids[size_t(device)] = id;
  g_active_pool_scopes.fetch_add(1, std::memory_order_relaxed);
}

MemPoolScope::~MemPoolScope() {
  tls_pool_ids[size_t(device_)] = prev_;
  g_active_pool_scopes.fetch_sub(1, std::memory_order_relaxed);
}

void release_mem_pool(int device, MemPoolId id) {
  check_device(Device::cuda(device));
  EMBER_CHECK(id != 0,
              "release_mem_pool: pool id 0 is the default pool, which is never released; "
              "use empty_cache() to return its unused memory");
#ifdef EMBER_WITH_CUDA
  device_allocator(device).release_pool(id, current_cuda_stream(device));
#endif
}

}  // namespace cuda

}  // namespace ember
