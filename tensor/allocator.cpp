// The CPU allocator and the per-device-type allocation entry point (tensor/allocator.h).
#include "ember/tensor/allocator.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ember/tensor/error.h"

namespace ember {

namespace {

constexpr size_t kCpuAlignment = 64;  // a cache line; also enough for any SIMD load Eigen emits

void free_cpu(void* ptr) { std::free(ptr); }

std::string format_mib(size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", double(bytes) / double(1 << 20));
  return text;
}

DataPtr allocate_cpu(size_t nbytes) {
  // Empty tensors own no memory: a null pointer and nothing to give back.
  if (nbytes == 0) return {};
  void* ptr = nullptr;
  if (nbytes <= SIZE_MAX - kCpuAlignment) {
    // aligned_alloc wants a size that is a multiple of the alignment.
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    ptr = std::aligned_alloc(kCpuAlignment, rounded);
  }
  EMBER_CHECK_STATUS(ptr != nullptr, alloc_failed, "CPU out of memory: tried to allocate ", nbytes,
                     " bytes (", format_mib(nbytes),
                     " MiB); free memory by dropping tensors or lower the batch size");
  return {ptr, &free_cpu};
}

std::array<std::atomic<DeviceAllocateFn>, kNumDeviceTypes>& device_allocators() {
  static std::array<std::atomic<DeviceAllocateFn>, kNumDeviceTypes> table{};
  return table;
}

}  // namespace

void register_device_allocator(DeviceType type, DeviceAllocateFn allocate_fn) {
  device_allocators()[size_t(type)].store(allocate_fn, std::memory_order_release);
}

DataPtr allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) return allocate_cpu(nbytes);
  DeviceAllocateFn fn = device_allocators()[size_t(device.type)].load(std::memory_order_acquire);
  EMBER_CHECK_STATUS(fn != nullptr, not_supported, "cannot allocate on ", device.str(),
                     ": this build of Ember has no runtime for that device type");
  return fn(nbytes, device);
}

}  // namespace ember
