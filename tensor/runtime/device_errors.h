// Device-side error reporting: a small flag buffer per GPU that kernels set when they meet bad
// input (an index out of range, ...) instead of trapping or synchronizing. The host reads it only
// at sync points (item(), copies to the CPU, synchronize) through check_device_errors, which throws
// bad_param with a message built from the code and its two details. Includable from .cu files.
#pragma once
#include <cstdint>
#include <string>

namespace ember::cuda {

// Codes built into Ember. Codes >= kFirstRegisteredDeviceError are free for register_device_error.
enum DeviceErrorCode : int {
  kDeviceErrorNone = 0,
  kDeviceErrorIndexOutOfRange = 1,  // details: the offending index, the size of the indexed dim
  kFirstRegisteredDeviceError = 1000,
};

// The layout of the buffer device_error_flag points to (the int* is &record.code).
struct DeviceErrorRecord {
  int code;  // 0 while no error; the first kernel that fails sets it with atomicCAS
  int reserved;
  int64_t details[2];
};
static_assert(sizeof(DeviceErrorRecord) == 24, "DeviceErrorRecord is shared by host and device");

// The flag of `device` (created zeroed on first use, lives as long as the process). Pass it to
// kernels that validate their input. Cheap after the first call.
int* device_error_flag(int device);
// Reads the flag of `device` (a host sync on a private stream: call only at sync points, after
// the work to check has been synchronized), resets it and throws bad_param describing the error.
// Does nothing when no kernel has set it. Must not be called during a CUDA graph capture.
void check_device_errors(int device);

// Turns the two details of a registered code into the sentence check_device_errors throws.
using DeviceErrorDescriber = std::string (*)(int64_t detail0, int64_t detail1);
// Registers (or replaces) a code >= kFirstRegisteredDeviceError: `name` says what went wrong
// ("class index out of range in cross_entropy"); `describe` may be null (the details are printed
// as numbers).
void register_device_error(int code, const std::string& name,
                           DeviceErrorDescriber describe = nullptr);

#if defined(__CUDACC__)
// Called by a kernel thread that met bad input. The first error wins; later ones are dropped, so a
// kernel may call this from many threads. Details are written after the code is claimed; the host
// reads them only after the kernel has finished.
__device__ inline void report_device_error(int* flag, int code, int64_t detail0, int64_t detail1) {
  auto* record = reinterpret_cast<DeviceErrorRecord*>(flag);
  if (atomicCAS(&record->code, 0, code) == 0) {
    record->details[0] = detail0;
    record->details[1] = detail1;
  }
}
#endif

}  // namespace ember::cuda
