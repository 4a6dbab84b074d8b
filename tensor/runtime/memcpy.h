// Raw byte copies between host and device memory on a stream. Host->device and device->device
// copies are asynchronous; device->host copies wait for the stream (a sync point: device-side
// error flags are checked there).
#pragma once
#include <cstddef>

#include "ember/tensor/runtime/stream.h"

namespace ember {

void memcpy_host_to_device(void* dst, const void* src, size_t nbytes, const Stream& stream);
void memcpy_device_to_host(void* dst, const void* src, size_t nbytes, const Stream& stream);
void memcpy_device_to_device(void* dst, const void* src, size_t nbytes, const Stream& stream);

}  // namespace ember
