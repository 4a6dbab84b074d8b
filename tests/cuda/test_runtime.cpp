// GPU tests of the device runtime: device queries, current-stream guards, events, the caching
// allocator (steady-state reuse, statistics, stream ownership, record_stream, private pools,
// allocation during capture, out of memory) and the device-side error flag. Each test returns at
// once when no GPU is visible.
#include <doctest/doctest.h>

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ember/tensor/device.h"
#include "ember/tensor/error.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"
#include "ember/tensor/runtime/stream.h"
#include "support/errors.h"

using ember::Device;
using ember::MemoryStats;
using ember::Status;
using ember::Stream;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

const Device kGpu = Device::cuda(0);

cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

void cuda_ok(cudaError_t err) { REQUIRE_MESSAGE(err == cudaSuccess, cudaGetErrorString(err)); }

std::string mib(size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", double(bytes) / double(1 << 20));
  return text;
}

// Memory from ember::allocate, given back when the owner goes out of scope (or on reset()).
class Buffer {
 public:
  Buffer(size_t nbytes, Device device) : data_(ember::allocate(nbytes, device)) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : data_(o.data_) { o.data_ = {}; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return data_.ptr; }
  void reset() {
    if (data_.deleter) data_.deleter(data_.ptr);
    data_ = {};
  }

 private:
  ember::DataPtr data_;
};

// A stream no other test allocates on, so the cache seen here holds only this test's blocks.
// Never destroyed: the allocator keys cached blocks by stream handle, and a destroyed stream's
// handle could come back for a new stream.
Stream private_stream() {
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream{kGpu, stream};
}

// Holds a stream at a host function until opened, so work stays "in flight" for as long as a test
// needs, without timing assumptions. Opens and drains the stream when destroyed.
class StreamGate {
 public:
  explicit StreamGate(const Stream& stream) : stream_(stream) {
    cuda_ok(cudaLaunchHostFunc(raw(stream), &StreamGate::wait_until_open, this));
  }
  ~StreamGate() {
    open();
    (void)cudaStreamSynchronize(raw(stream_));
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void open() { open_.store(true); }

 private:
  static void CUDART_CB wait_until_open(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    while (!gate->open_.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  Stream stream_;
  std::atomic<bool> open_{false};
};

void write_error_record(int code, int64_t detail0, int64_t detail1) {
  const ember::cuda::DeviceErrorRecord record{code, 0, {detail0, detail1}};
  cuda_ok(cudaMemcpy(ember::cuda::device_error_flag(0), &record, sizeof(record),
                     cudaMemcpyHostToDevice));
  // cudaMemcpy from pageable memory may return before the bytes land; the flag is read on another
  // (non-blocking) stream, so wait for them.
  cuda_ok(cudaDeviceSynchronize());
}

}  // namespace

TEST_CASE("device count, properties and the current device") {
  if (!ember::cuda::is_available()) return;
  using namespace ember::cuda;
  const int count = device_count();
  CHECK(count >= 1);
  CHECK(built_with_cuda());

  const DeviceProperties& props = device_properties(0);
  cudaDeviceProp reference{};
  cuda_ok(cudaGetDeviceProperties(&reference, 0));
  CHECK(props.name == std::string(reference.name));
  CHECK(props.major == reference.major);
  CHECK(props.minor == reference.minor);
  CHECK(props.sm_count == reference.multiProcessorCount);
  CHECK(props.total_memory == reference.totalGlobalMem);
  CHECK(props.shared_memory_per_block_optin == reference.sharedMemPerBlockOptin);
  CHECK(props.runtime_version > 0);
  CHECK(props.driver_version > 0);
  CHECK(&device_properties(0) == &props);  // cached, not queried again

  const std::string message =
      error_of([&] { check_device(Device::cuda(count)); }, Status::bad_param);
  CHECK(contains(message, "cuda:" + std::to_string(count) + " is not a visible GPU"));
  error_of([&] { device_properties(-1); }, Status::bad_param);

  set_device(0);
  CHECK(current_device() == 0);
  {
    ember::DeviceGuard guard(Device::cuda(count - 1));
    CHECK(current_device() == count - 1);
  }
  CHECK(current_device() == 0);
  CHECK_NOTHROW(synchronize());
  CHECK_NOTHROW(synchronize(0));
}

TEST_CASE("current streams are per thread and per device, changed by StreamGuard") {
  if (!ember::cuda::is_available()) return;
  const Stream default_stream = ember::default_stream(kGpu);
  REQUIRE(default_stream.handle != nullptr);  // our own stream, not the legacy one
  unsigned flags = 0;
  cuda_ok(cudaStreamGetFlags(raw(default_stream), &flags));
  CHECK((flags & cudaStreamNonBlocking) != 0);  // capturable, not synchronized with stream 0

  Stream seen_by_new_thread;
  std::thread([&] { seen_by_new_thread = ember::current_stream(kGpu); }).join();
  CHECK(seen_by_new_thread == default_stream);

  const Stream a = ember::new_stream(kGpu);
  const Stream b = ember::new_stream(kGpu);
  CHECK(a != default_stream);
  CHECK(a != b);
  cuda_ok(cudaStreamGetFlags(raw(a), &flags));
  CHECK((flags & cudaStreamNonBlocking) != 0);

  const Stream before = ember::current_stream(kGpu);
  {
    ember::StreamGuard guard_a(a);
    CHECK(ember::current_stream(kGpu) == a);
    {
      ember::StreamGuard guard_b(b);
      CHECK(ember::current_stream(kGpu) == b);
    }
    CHECK(ember::current_stream(kGpu) == a);
    Stream seen_by_other_thread;
    std::thread([&] { seen_by_other_thread = ember::current_stream(kGpu); }).join();
    CHECK(seen_by_other_thread == default_stream);
    CHECK(ember::current_stream(Device::cpu()).handle == nullptr);  // other devices untouched
  }
  CHECK(ember::current_stream(kGpu) == before);

  // The pool is small and reused round-robin.
  std::set<void*> handles;
  for (int i = 0; i < 200; ++i) handles.insert(ember::new_stream(kGpu).handle);
  CHECK(handles.size() > 1);
  CHECK(handles.size() <= 64);
  CHECK(handles.count(default_stream.handle) == 0);

  CHECK(a.query());
  CHECK_NOTHROW(a.synchronize());
}

TEST_CASE("events time work and order streams without a host sync") {
  if (!ember::cuda::is_available()) return;
  const Stream stream = ember::new_stream(kGpu);
  ember::StreamGuard guard(stream);
  Buffer buffer(size_t(256) << 20, kGpu);

  ember::Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  start.record(stream);
  for (int i = 0; i < 10; ++i)
    cuda_ok(cudaMemsetAsync(buffer.get(), i, size_t(256) << 20, raw(stream)));
  end.record(stream);
  end.synchronize();
  CHECK(end.query());
  const float ms = start.elapsed_ms(end);
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);

  ember::Event untimed;
  untimed.record(stream);
  CHECK(contains(error_of([&] { start.elapsed_ms(untimed); }, Status::bad_param), "enable_timing"));
  ember::Event never_recorded(/*enable_timing=*/true);
  CHECK(never_recorded.query());
  CHECK_NOTHROW(never_recorded.synchronize());
  CHECK(contains(error_of([&] { start.elapsed_ms(never_recorded); }, Status::bad_param),
                 "never recorded"));

  // b waits for an event on a while a is held by a gate: b cannot finish until a does.
  const Stream a = ember::new_stream(kGpu);
  const Stream b = ember::new_stream(kGpu);
  ember::Event on_a;
  {
    StreamGate gate(a);
    on_a.record(a);
    on_a.wait(b);
    cuda_ok(cudaMemsetAsync(buffer.get(), 0, 4, raw(b)));
    CHECK_FALSE(on_a.query());
    CHECK_FALSE(a.query());
    CHECK_FALSE(b.query());
    gate.open();
    b.synchronize();
    CHECK(on_a.query());
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // "not ready" answers leave no error behind

  ember::Event moved(std::move(on_a));
  CHECK(moved.handle() != nullptr);
  CHECK(on_a.handle() == nullptr);
  CHECK(moved.query());
}

TEST_CASE("a steady allocation pattern needs no new driver allocations") {
  if (!ember::cuda::is_available()) return;
  ember::cuda::empty_cache();
  ember::StreamGuard guard(private_stream());
  // Small and large pools, odd sizes, the pool boundary (1 MiB) and segments of their own.
  const std::vector<size_t> sizes = {1,
                                     512,
                                     4000,
                                     size_t(1) << 20,
                                     100,
                                     (1 << 20) + 1,
                                     size_t(3) << 20,
                                     size_t(12) << 20,
                                     size_t(25) << 20};
  auto run_pattern = [&](bool reversed) {
    std::vector<Buffer> live;
    std::set<void*> pointers;
    for (size_t i = 0; i < sizes.size(); ++i) {
      live.emplace_back(sizes[reversed ? sizes.size() - 1 - i : i], kGpu);
      pointers.insert(live.back().get());
    }
    CHECK(pointers.size() == sizes.size());
    CHECK(pointers.count(nullptr) == 0);
    // Free every other block first, so frees merge in both directions.
    for (size_t i = 0; i < live.size(); i += 2) live[i].reset();
    for (size_t i = 1; i < live.size(); i += 2) live[i].reset();
  };
  run_pattern(false);
  const MemoryStats warm = ember::cuda::memory_stats(0);
  CHECK(warm.num_driver_allocs > 0);
  run_pattern(false);
  run_pattern(true);
  const MemoryStats steady = ember::cuda::memory_stats(0);
  CHECK(steady.num_driver_allocs == warm.num_driver_allocs);
  CHECK(steady.num_driver_frees == warm.num_driver_frees);
  CHECK(steady.reserved_bytes == warm.reserved_bytes);
  CHECK(steady.allocated_bytes == warm.allocated_bytes);
  CHECK(ember::allocate(0, kGpu).ptr == nullptr);  // empty tensors own no memory
}

TEST_CASE("memory statistics count allocated, reserved and peak bytes") {
  if (!ember::cuda::is_available()) return;
  using ember::cuda::memory_stats;
  ember::cuda::empty_cache();
  ember::StreamGuard guard(private_stream());
  ember::cuda::reset_peak_memory_stats(0);
  const MemoryStats base = memory_stats(0);
  CHECK(base.peak_allocated_bytes == base.allocated_bytes);
  CHECK(base.reserved_bytes >= base.allocated_bytes);
  const size_t MiB = size_t(1) << 20;
  {
    Buffer a(3 * MiB, kGpu), b(5 * MiB, kGpu);
    const MemoryStats two = memory_stats(0);
    CHECK(two.allocated_bytes == base.allocated_bytes + 8 * MiB);
    CHECK(two.peak_allocated_bytes == two.allocated_bytes);
    CHECK(two.reserved_bytes == base.reserved_bytes + 20 * MiB);  // one shared large segment
    CHECK(two.num_driver_allocs == base.num_driver_allocs + 1);

    a.reset();
    const MemoryStats one = memory_stats(0);
    CHECK(one.allocated_bytes == base.allocated_bytes + 5 * MiB);
    CHECK(one.peak_allocated_bytes == base.allocated_bytes + 8 * MiB);
    CHECK(one.reserved_bytes == two.reserved_bytes);  // cached, not returned
    ember::cuda::reset_peak_memory_stats(0);
    CHECK(memory_stats(0).peak_allocated_bytes == one.allocated_bytes);

    Buffer small(100, kGpu);  // rounded to 512 bytes, from a 2 MiB small-pool segment
    const MemoryStats with_small = memory_stats(0);
    CHECK(with_small.allocated_bytes == one.allocated_bytes + 512);
    CHECK(with_small.reserved_bytes == one.reserved_bytes + 2 * MiB);
  }
  const MemoryStats freed = memory_stats(0);
  CHECK(freed.allocated_bytes == base.allocated_bytes);
  CHECK(freed.reserved_bytes == base.reserved_bytes + 22 * MiB);
  ember::cuda::empty_cache();
  const MemoryStats emptied = memory_stats(0);
  CHECK(emptied.reserved_bytes == base.reserved_bytes);
  CHECK(emptied.num_driver_frees == base.num_driver_frees + 2);
}

TEST_CASE("a freed block is reused only by the stream it was allocated on") {
  if (!ember::cuda::is_available()) return;
  const Stream a = private_stream(), b = private_stream();
  const size_t MiB = size_t(1) << 20;
  void* first = nullptr;
  {
    ember::StreamGuard guard(a);
    Buffer block(MiB, kGpu);
    first = block.get();
  }
  {
    ember::StreamGuard guard(b);
    Buffer block(MiB, kGpu);
    CHECK(block.get() != first);
  }
  {
    ember::StreamGuard guard(a);
    Buffer block(MiB, kGpu);
    CHECK(block.get() == first);
  }
}

TEST_CASE("record_stream keeps a block from reuse until the recorded stream is done with it") {
  if (!ember::cuda::is_available()) return;
  const Stream a = private_stream(), user = private_stream();
  ember::StreamGuard guard(a);
  const size_t MiB = size_t(1) << 20;
  const uint64_t driver_allocs = ember::cuda::memory_stats(0).num_driver_allocs;

  Buffer block(MiB, kGpu);
  void* const ptr = block.get();
  {
    StreamGate gate(user);  // `user` has work queued that may read the block
    ember::cuda::record_stream(ptr, user);
    ember::cuda::record_stream(ptr, user);  // recording twice is harmless
    ember::cuda::record_stream(ptr, a);     // the allocating stream: nothing to track
    block.reset();
    {
      Buffer while_in_use(MiB, kGpu);
      CHECK(while_in_use.get() != ptr);
    }
    gate.open();
    user.synchronize();
    // The recorded use has finished: the next allocation on `a` sees the block free again.
    Buffer again1(MiB, kGpu), again2(MiB, kGpu);
    CHECK((again1.get() == ptr || again2.get() == ptr));
  }
  CHECK(ember::cuda::memory_stats(0).num_driver_allocs == driver_allocs + 1);

  Buffer other(MiB, kGpu);
  CHECK(contains(
      error_of([&] { ember::cuda::record_stream(static_cast<char*>(other.get()) + 512, user); },
               Status::bad_param),
      "not the start"));
  CHECK_NOTHROW(ember::cuda::record_stream(nullptr, user));
  CHECK_NOTHROW(ember::cuda::record_stream(other.get(), ember::current_stream(Device::cpu())));
}

TEST_CASE("private pools keep their blocks apart and are released on demand") {
  if (!ember::cuda::is_available()) return;
  using namespace ember::cuda;
  ember::StreamGuard guard(private_stream());
  const size_t MiB = size_t(1) << 20;
  const MemPoolId pool = new_mem_pool_id();
  const MemPoolId other_pool = new_mem_pool_id();
  CHECK(pool != 0);
  CHECK(other_pool != pool);

  void* in_pool = nullptr;
  {
    MemPoolScope scope(0, pool);
    Buffer block(MiB, kGpu);
    in_pool = block.get();
  }
  {
    Buffer block(MiB, kGpu);  // the default pool never sees the private pool's blocks
    CHECK(block.get() != in_pool);
  }
  {
    MemPoolScope outer(0, pool);
    {
      MemPoolScope inner(0, other_pool);
      Buffer block(MiB, kGpu);
      CHECK(block.get() != in_pool);
    }
    Buffer block(MiB, kGpu);  // back in `pool` after the inner scope ends
    CHECK(block.get() == in_pool);
  }
  {
    // A block freed outside its scope still returns to its own pool.
    Buffer block = [&] {
      MemPoolScope scope(0, pool);
      return Buffer(MiB, kGpu);
    }();
    CHECK(block.get() == in_pool);
  }
  {
    MemPoolScope scope(0, pool);
    Buffer block(MiB, kGpu);
    CHECK(block.get() == in_pool);
  }

  const MemoryStats before = memory_stats(0);
  release_mem_pool(0, pool);
  release_mem_pool(0, other_pool);
  const MemoryStats after = memory_stats(0);
  CHECK(after.reserved_bytes == before.reserved_bytes - 4 * MiB);  // a small segment each
  CHECK(after.num_driver_frees == before.num_driver_frees + 2);
  CHECK_NOTHROW(release_mem_pool(0, new_mem_pool_id()));  // never used: nothing to do

  error_of([] { MemPoolScope scope(0, 0); }, Status::bad_param);
  error_of([] { release_mem_pool(0, 0); }, Status::bad_param);
}

TEST_CASE("during a capture, new memory comes only from private pools") {
  if (!ember::cuda::is_available()) return;
  using namespace ember::cuda;
  const Stream stream = private_stream(), user = private_stream();
  ember::StreamGuard guard(stream);
  const size_t MiB = size_t(1) << 20;
  void* warm = nullptr;
  {
    Buffer block(MiB, kGpu);
    warm = block.get();
  }
  const MemPoolId pool = new_mem_pool_id();
  {
    // Two blocks still read by `user` while the capture runs: one freed before it (its event is
    // pending and must not be queried during the capture), one freed during it (its event must
    // not be recorded until the capture is over). Either mistake invalidates the capture.
    StreamGate gate(user);
    Buffer freed_before(4 * MiB, kGpu), freed_during(2 * MiB, kGpu);
    record_stream(freed_before.get(), user);
    record_stream(freed_during.get(), user);
    freed_before.reset();
    // A block of `user` that the captured stream uses: an event recorded for it during the
    // capture would land inside the graph, and querying it later is an error.
    Buffer used_by_capture = [&] {
      ember::StreamGuard on_user(user);
      return Buffer(MiB, kGpu);
    }();
    record_stream(used_by_capture.get(), stream);

    cuda_ok(cudaStreamBeginCapture(raw(stream), cudaStreamCaptureModeGlobal));
    {
      Buffer cached(MiB, kGpu);  // a cached block fits: allowed
      CHECK(cached.get() == warm);
    }
    const std::string message =
        error_of([&] { Buffer fresh(64 * MiB, kGpu); }, Status::not_supported);
    CHECK(contains(message, "capture"));
    CHECK(contains(message, "MemPoolScope"));
    {
      MemPoolScope scope(0, pool);
      Buffer fresh(64 * MiB, kGpu);  // new memory for the graph's private pool
      CHECK(fresh.get() != nullptr);
    }
    freed_during.reset();
    used_by_capture.reset();
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamEndCapture(raw(stream), &graph));
    cuda_ok(cudaGraphDestroy(graph));
  }  // the gate opens: `user` finishes

  // Both blocks come back once their uses are known to be over: the first allocation after the
  // capture records the deferred event, the sync completes it, and then the whole 20 MiB segment
  // they were cut from is free again.
  const uint64_t driver_allocs = memory_stats(0).num_driver_allocs;
  { Buffer trigger(512, kGpu); }
  synchronize(0);
  { Buffer whole_segment(20 * MiB, kGpu); }
  CHECK(memory_stats(0).num_driver_allocs == driver_allocs);

  const uint64_t frees = memory_stats(0).num_driver_frees;
  release_mem_pool(0, pool);
  CHECK(memory_stats(0).num_driver_frees == frees + 1);
}

TEST_CASE("a failed cudaMalloc releases the cache and retries") {
  if (!ember::cuda::is_available()) return;
  using ember::cuda::memory_stats;
  ember::cuda::empty_cache();
  size_t free_bytes = 0, total_bytes = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Two blocks of 60% of the free memory cannot both be held: the second fits only after the
  // first one's cached segment has gone back to the driver.
  const size_t big = free_bytes / 10 * 6;
  const Stream a = private_stream(), b = private_stream();
  {
    ember::StreamGuard guard(a);
    Buffer first(big, kGpu);
  }
  const MemoryStats cached = memory_stats(0);
  CHECK(cached.reserved_bytes >= big);
  {
    ember::StreamGuard guard(b);  // a's cached block is not b's to reuse
    Buffer second(big, kGpu);
    CHECK(second.get() != nullptr);
  }
  const MemoryStats after = memory_stats(0);
  CHECK(after.num_alloc_retries == cached.num_alloc_retries + 1);
  CHECK(after.num_driver_frees >= cached.num_driver_frees + 1);
  CHECK(after.num_ooms == cached.num_ooms);
  ember::cuda::empty_cache();
}

TEST_CASE("out of memory throws alloc_failed with the numbers and leaves the allocator usable") {
  if (!ember::cuda::is_available()) return;
  using ember::cuda::memory_stats;
  const MemoryStats before = memory_stats(0);
  const size_t ten_tib = size_t(10) << 40;
  const std::string message = error_of([&] { Buffer huge(ten_tib, kGpu); }, Status::alloc_failed);
  const MemoryStats after = memory_stats(0);
  CHECK(after.num_ooms == before.num_ooms + 1);
  CHECK(after.num_alloc_retries == before.num_alloc_retries + 1);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(contains(message, "CUDA out of memory on cuda:0: tried to allocate " + mib(ten_tib) +
                              " MiB; " + mib(after.allocated_bytes) +
                              " MiB allocated by tensors, " + mib(after.reserved_bytes) +
                              " MiB reserved (cached); free memory by "
                              "dropping tensors or lower the batch size"));
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed cudaMalloc left nothing behind

  Buffer usable(size_t(1) << 20, kGpu);
  REQUIRE(usable.get() != nullptr);
  cuda_ok(cudaMemset(usable.get(), 0, size_t(1) << 20));
  cuda_ok(cudaDeviceSynchronize());
}

TEST_CASE("the device error flag reports, resets and names registered codes") {
  if (!ember::cuda::is_available()) return;
  using namespace ember::cuda;
  int* flag = device_error_flag(0);
  REQUIRE(flag != nullptr);
  CHECK(device_error_flag(0) == flag);
  CHECK_NOTHROW(check_device_errors(0));  // created zeroed

  write_error_record(kDeviceErrorIndexOutOfRange, 7, 5);
  std::string message = error_of([] { check_device_errors(0); }, Status::bad_param);
  CHECK(contains(message, "cuda:0"));
  CHECK(contains(message, "index out of range"));
  CHECK(contains(message, "index 7"));
  CHECK(contains(message, "size 5"));
  CHECK_NOTHROW(check_device_errors(0));  // reset by the check
  DeviceErrorRecord back{};
  cuda_ok(cudaMemcpy(&back, flag, sizeof(back), cudaMemcpyDeviceToHost));
  CHECK(back.code == kDeviceErrorNone);

  // The sync points report it too.
  write_error_record(kDeviceErrorIndexOutOfRange, -1, 3);
  CHECK(contains(error_of([] { synchronize(0); }, Status::bad_param), "index -1"));
  CHECK_NOTHROW(synchronize(0));
  write_error_record(kDeviceErrorIndexOutOfRange, 9, 2);
  CHECK(contains(error_of([] { ember::current_stream(kGpu).synchronize(); }, Status::bad_param),
                 "index 9"));

  const int code = kFirstRegisteredDeviceError + 42;
  register_device_error(
      code, "class index out of range in a test op", [](int64_t target, int64_t classes) {
        return "target " + std::to_string(target) + " with " + std::to_string(classes) + " classes";
      });
  write_error_record(code, 11, 10);
  message = error_of([] { check_device_errors(0); }, Status::bad_param);
  CHECK(contains(message, "class index out of range in a test op: target 11 with 10 classes"));

  write_error_record(999, 1, 2);
  CHECK(contains(error_of([] { check_device_errors(0); }, Status::bad_param),
                 "unknown device error code 999"));
  CHECK_NOTHROW(check_device_errors(0));
}

#endif  // EMBER_WITH_CUDA
