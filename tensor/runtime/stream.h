// Streams and events. Every kernel, cuBLAS and NCCL call runs on the current stream of its device;
// the current stream is per thread and per device, changed with StreamGuard. The default current
// stream of a device is a non-blocking stream Ember creates (so it can be captured as a graph).
#pragma once
#include <cstdint>

#include "ember/tensor/device.h"

namespace ember {

// A CUDA stream (handle is a cudaStream_t) or the CPU's trivial stream.
struct Stream {
  Device device;
  void* handle = nullptr;
  bool operator==(const Stream& o) const { return device == o.device && handle == o.handle; }
  bool operator!=(const Stream& o) const { return !(*this == o); }
  void synchronize() const;
  bool query() const;  // true when all work on it has finished
};

Stream current_stream(Device device);
Stream default_stream(Device device);  // the stream current_stream starts as
// A new stream from a small per-device pool (like PyTorch's getStreamFromPool).
Stream new_stream(Device device);
void set_current_stream(const Stream& s);

// RAII: make `s` the current stream of its device for this scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// RAII: make `device` the current CUDA device for this scope (no-op for the CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// A CUDA event (created lazily, disabled timing unless asked for).
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  void wait(const Stream& s) const;  // make s wait for this event (no host sync)
  void synchronize() const;
  bool query() const;
  float elapsed_ms(const Event& end) const;  // both recorded with timing enabled
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

}  // namespace ember
