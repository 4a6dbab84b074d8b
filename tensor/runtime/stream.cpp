// Streams, events and the device guard. Each GPU gets one non-blocking default stream (made once,
// so a training step on it can be captured as a CUDA graph) and a small round-robin pool of
// non-blocking streams for new_stream. The current stream is per thread and per device. The CPU
// stream is trivial: a null handle, nothing to wait for.
#include "ember/tensor/runtime/stream.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"

#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember {

#ifdef EMBER_WITH_CUDA

namespace {

constexpr int kStreamPoolSize = 32;

// Stream and event creation below may happen while another stream is being captured (a side
// stream forked inside a captured step); neither is captured work, so it runs in relaxed mode.

struct DeviceStreams {
  std::once_flag default_once;
  cudaStream_t default_stream = nullptr;
  std::once_flag pool_once;
  std::array<cudaStream_t, kStreamPoolSize> pool{};
  std::atomic<uint32_t> next_pool_index{0};
};

// Streams are never destroyed: they are handed out as raw handles and may be used until exit.
DeviceStreams& device_streams(int device) {
  static DeviceStreams* all = new DeviceStreams[size_t(cuda::device_count())];
  return all[device];
}

cudaStream_t create_non_blocking_stream(int device) {
  DeviceGuard on_device(
      Device::cuda(device));  // a stream belongs to the device current at creation
  cuda::RelaxedCaptureModeGuard relaxed;
  cudaStream_t stream = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// The stream a thread set for each device; `set` false means "the device's default stream".
struct CurrentStreamSlot {
  bool set = false;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<CurrentStreamSlot> tls_current_streams;

cudaStream_t as_cuda_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

}  // namespace

Stream default_stream(Device device) {
  cuda::check_device(device);
  if (device.is_cpu()) return Stream{Device::cpu(), nullptr};
  DeviceStreams& streams = device_streams(device.index);
  std::call_once(streams.default_once,
                 [&] { streams.default_stream = create_non_blocking_stream(device.index); });
  return Stream{device, streams.default_stream};
}

Stream current_stream(Device device) {
  if (device.is_cpu()) {
    cuda::check_device(device);
    return Stream{Device::cpu(), nullptr};
  }
  cuda::check_device(device);
  if (size_t(device.index) < tls_current_streams.size()) {
    const CurrentStreamSlot& slot = tls_current_streams[size_t(device.index)];
    if (slot.set) return Stream{device, slot.stream};
  }
  return default_stream(device);
}

Stream new_stream(Device device) {
  cuda::check_device(device);
  if (device.is_cpu()) return Stream{Device::cpu(), nullptr};
  DeviceStreams& streams = device_streams(device.index);
  std::call_once(streams.pool_once, [&] {
    for (cudaStream_t& s : streams.pool) s = create_non_blocking_stream(device.index);
  });
  const uint32_t i = streams.next_pool_index.fetch_add(1, std::memory_order_relaxed);
  return Stream{device, streams.pool[i % kStreamPoolSize]};
}

void set_current_stream(const Stream& s) {
  cuda::check_device(s.device);
  if (s.device.is_cpu()) {
    EMBER_CHECK(s.handle == nullptr, "set_current_stream: a CPU stream has a null handle, got ",
                s.handle);
    return;
  }
  if (tls_current_streams.size() <= size_t(s.device.index))
    tls_current_streams.resize(size_t(cuda::device_count()));
  tls_current_streams[size_t(s.device.index)] = CurrentStreamSlot{true, as_cuda_stream(s)};
}

void Stream::synchronize() const {
  if (device.is_cpu()) return;
  EMBER_CUDA_CHECK(cudaStreamSynchronize(as_cuda_stream(*this)));
  // A sync point: report what kernels flagged as bad input (see tensor/runtime/device_errors.h).
  cuda::check_device_errors(device.index);
}

bool Stream::query() const {
  if (device.is_cpu()) return true;
  const cudaError_t err = cudaStreamQuery(as_cuda_stream(*this));
  if (err == cudaErrorNotReady) {
    // "Not ready" is an answer, not a failure; keep it out of the next launch check.
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

// ---- DeviceGuard --------------------------------------------------------------------------------

DeviceGuard::DeviceGuard(Device device) {
  if (device.is_cpu()) return;
  const int current = cuda::current_device();
  if (current != device.index) {
    cuda::set_device(device.index);
    prev_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // Cannot throw from a destructor; restoring a device that was valid a moment ago does not fail
  // unless the context is already broken, which the next checked call reports.
  if (prev_ >= 0) (void)cudaSetDevice(prev_);
}

// ---- Event
// ---------------------------------------------------------------------------------------

Event::~Event() {
  if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_), timing_(o.timing_) {
  o.handle_ = nullptr;
  o.device_ = -1;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = o.handle_;
    device_ = o.device_;
    timing_ = o.timing_;
    o.handle_ = nullptr;
    o.device_ = -1;
  }
  return *this;
}

void Event::record(const Stream& s) {
  // CPU work is synchronous: there is nothing to mark, and the event stays complete.
  if (s.device.is_cpu()) return;
  cuda::check_device(s.device);
  DeviceGuard on_device(s.device);
  if (handle_ == nullptr) {
    cuda::RelaxedCaptureModeGuard relaxed;
    cudaEvent_t event = nullptr;
    EMBER_CUDA_CHECK(
        cudaEventCreateWithFlags(&event, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = event;
    device_ = s.device.index;
  }
  EMBER_CHECK(device_ == s.device.index, "Event::record: the event belongs to cuda:", device_,
              " (where it was first recorded) but the stream is on ", s.device.str(),
              "; use one event per device");
  EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), as_cuda_stream(s)));
}

void Event::wait(const Stream& s) const {
  // Nothing recorded (or a CPU stream): nothing to wait for.
  if (handle_ == nullptr || s.device.is_cpu()) return;
  cuda::check_device(s.device);
  DeviceGuard on_device(s.device);
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(as_cuda_stream(s), static_cast<cudaEvent_t>(handle_), 0));
}

void Event::synchronize() const {
  if (handle_ == nullptr) return;
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
}

bool Event::query() const {
  if (handle_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  EMBER_CHECK(timing_ && end.timing_,
              "Event::elapsed_ms: both events must be created with "
              "Event(/*enable_timing=*/true); the ",
              timing_ ? "end" : "start", " event has timing disabled");
  EMBER_CHECK(handle_ != nullptr && end.handle_ != nullptr, "Event::elapsed_ms: the ",
              handle_ == nullptr ? "start" : "end",
              " event was never recorded on a CUDA stream; record both first");
  float ms = 0.0f;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_),
                                        static_cast<cudaEvent_t>(end.handle_)));
  return ms;
}

#else  // !EMBER_WITH_CUDA: only the CPU stream exists; CUDA devices fail in check_device.

Stream default_stream(Device device) {
  cuda::check_device(device);
  return Stream{Device::cpu(), nullptr};
}

Stream current_stream(Device device) {
  cuda::check_device(device);
  return Stream{Device::cpu(), nullptr};
}

Stream new_stream(Device device) {
  cuda::check_device(device);
  return Stream{Device::cpu(), nullptr};
}

void set_current_stream(const Stream& s) {
  cuda::check_device(s.device);
  EMBER_CHECK(s.handle == nullptr, "set_current_stream: a CPU stream has a null handle, got ",
              s.handle);
}

void Stream::synchronize() const { cuda::check_device(device); }

bool Stream::query() const {
  cuda::check_device(device);
  return true;
}

DeviceGuard::DeviceGuard(Device device) { cuda::check_device(device); }
DeviceGuard::~DeviceGuard() = default;

// Without CUDA no event is ever created: handle_ stays null, every event is complete.
Event::~Event() = default;

Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_), timing_(o.timing_) {}

Event& Event::operator=(Event&& o) noexcept {
  handle_ = o.handle_;
  device_ = o.device_;
  timing_ = o.timing_;
  return *this;
}

void Event::record(const Stream& s) { cuda::check_device(s.device); }
void Event::wait(const Stream& s) const { cuda::check_device(s.device); }
void Event::synchronize() const {}
bool Event::query() const { return true; }

float Event::elapsed_ms(const Event& end) const {
  (void)end;
  EMBER_THROW(not_supported,
              "Event::elapsed_ms: this build of Ember has no CUDA, so events "
              "are never recorded and carry no time");
}

#endif  // EMBER_WITH_CUDA

// ---- StreamGuard (the same in both builds)
// --------------------------------------------------------

StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device)) {
  set_current_stream(s);
}

StreamGuard::~StreamGuard() {
  // prev_ was the valid current stream of a valid device, so restoring it cannot fail; guard anyway
  // because a destructor must not throw.
  try {
    set_current_stream(prev_);
  } catch (...) {
  }
}

}  // namespace ember
