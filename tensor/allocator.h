// The memory a Storage owns, and the allocation entry point every tensor comes through. The CPU
// allocator (64-byte aligned blocks) lives here in the core; other device types allocate through
// the function their runtime registers (tensor/runtime/allocator.h: the CUDA caching allocator),
// so the core includes no device runtime.
#pragma once
#include <cstddef>

#include "ember/tensor/device.h"

namespace ember {

// The function that frees a block of memory (the CPU allocator's free, the CUDA caching
// allocator's release, or a user's deleter for memory a tensor borrows).
using Deleter = void (*)(void* ptr);

// Memory owned by a Storage: the pointer and the function that gives it back.
struct DataPtr {
  void* ptr = nullptr;
  Deleter deleter = nullptr;
};

// Allocates `nbytes` on `device`; CUDA memory is associated with the device's current stream.
// Throws alloc_failed when the memory is not there, and not_supported for a device type whose
// runtime this build lacks.
DataPtr allocate(size_t nbytes, Device device);

// How a device type's runtime allocates; registered once, when the library loads.
using DeviceAllocateFn = DataPtr (*)(size_t nbytes, Device device);
void register_device_allocator(DeviceType type, DeviceAllocateFn allocate_fn);

}  // namespace ember
