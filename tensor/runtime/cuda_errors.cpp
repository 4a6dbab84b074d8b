// CUDA error reporting: the throw helpers behind EMBER_CUDA_CHECK / EMBER_CUBLAS_CHECK / ...
// (tensor/runtime/cuda_check.h), and the device-side error flag kernels set on bad input
// (tensor/runtime/device_errors.h) with its code table.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "ember/tensor/device.h"
#include "ember/tensor/error.h"
#include "ember/tensor/runtime/device_errors.h"
#include "ember/tensor/runtime/stream.h"

#ifdef EMBER_WITH_CUDA
#include <cublas_api.h>
#include <curand.h>

#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#endif

namespace ember::cuda {

// ---- the code table
// -------------------------------------------------------------------------------
namespace {

struct DeviceErrorKind {
  std::string name;
  DeviceErrorDescriber describe = nullptr;
};

std::string describe_index_out_of_range(int64_t index, int64_t size) {
  if (size <= 0)
    return ::ember::detail::concat("index ", index, " was used on an empty dimension (size ", size,
                                   ")");
  return ::ember::detail::concat("index ", index, " is out of bounds for a dimension of size ",
                                 size, " (valid indices are 0 to ", size - 1, ")");
}

struct DeviceErrorTable {
  std::mutex mutex;
  std::map<int, DeviceErrorKind> kinds;
  DeviceErrorTable() {
    kinds[kDeviceErrorIndexOutOfRange] = {"index out of range", &describe_index_out_of_range};
  }
};

DeviceErrorTable& device_error_table() {
  static DeviceErrorTable table;
  return table;
}

[[maybe_unused]] std::string describe_device_error(int code, int64_t detail0, int64_t detail1) {
  DeviceErrorTable& table = device_error_table();
  std::lock_guard lock(table.mutex);
  auto it = table.kinds.find(code);
  if (it == table.kinds.end())
    return ::ember::detail::concat(
        "unknown device error code ", code, " (details ", detail0, ", ", detail1,
        "); a kernel reported a code nobody registered with register_device_error");
  const DeviceErrorKind& kind = it->second;
  if (kind.describe) return kind.name + ": " + kind.describe(detail0, detail1);
  return ::ember::detail::concat(kind.name, " (details ", detail0, ", ", detail1, ")");
}

}  // namespace

void register_device_error(int code, const std::string& name, DeviceErrorDescriber describe) {
  EMBER_CHECK(
      code >= kFirstRegisteredDeviceError, "register_device_error: code ", code,
      " is reserved for Ember's built-in codes; use a code >= ", int(kFirstRegisteredDeviceError));
  EMBER_CHECK(!name.empty(), "register_device_error: code ", code,
              " needs a name saying what went wrong");
  DeviceErrorTable& table = device_error_table();
  std::lock_guard lock(table.mutex);
  table.kinds[code] = {name, describe};
}

#ifdef EMBER_WITH_CUDA

namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Non-sticky errors (out of memory, bad argument) stay in the runtime's last-error slot; clear
  // it so the next EMBER_CUDA_LAUNCH_CHECK does not report this failure a second time.
  (void)cudaGetLastError();
  Status status = Status::execution_failed;
  std::string hint;
  if (err == cudaErrorMemoryAllocation) {
    status = Status::alloc_failed;
    hint =
        "; the GPU is out of memory: drop tensors, call ember::cuda::empty_cache() or lower the "
        "batch size";
  } else if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion) {
    status = Status::arch_mismatch;
    int device = -1, major = 0, minor = 0;
    if (cudaGetDevice(&device) == cudaSuccess) {
      (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    (void)cudaGetLastError();
    hint = ::ember::detail::concat(
        "; this build of Ember has no kernel image for this GPU (compute capability ", major, ".",
        minor,
        "): rebuild with CMAKE_CUDA_ARCHITECTURES including it, e.g. "
        "-DCMAKE_CUDA_ARCHITECTURES=",
        major * 10 + minor);
  } else if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
             err == cudaErrorAssert || err == cudaErrorIllegalInstruction ||
             err == cudaErrorMisalignedAddress) {
    hint =
        "; a kernel failed, possibly one launched earlier (CUDA reports errors asynchronously): "
        "rerun with CUDA_LAUNCH_BLOCKING=1 to find it; the CUDA context is now unusable";
  }
  ::ember::detail::throw_error(
      status, file, line,
      ::ember::detail::concat("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (",
                              cudaGetErrorString(err), ") at ", file, ":", line, hint));
}

namespace {
const char* curand_status_name(int status) {
  switch (status) {
    case CURAND_STATUS_VERSION_MISMATCH:
      return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED:
      return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED:
      return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR:
      return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE:
      return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE:
      return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED:
      return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE:
      return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE:
      return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED:
      return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH:
      return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR:
      return "CURAND_STATUS_INTERNAL_ERROR";
    default:
      return "unknown cuRAND status";
  }
}
}  // namespace

[[noreturn]] void throw_library_error(const char* library, int status, const char* status_name,
                                      const char* call, const char* file, int line) {
  const std::string lib = library;
  if (lib == "cuRAND" && (status_name == nullptr || *status_name == '\0'))
    status_name = curand_status_name(status);
  Status ember_status = Status::execution_failed;
  std::string hint;
  if ((lib == "cuBLAS" && status == CUBLAS_STATUS_ALLOC_FAILED) ||
      (lib == "cuRAND" && status == CURAND_STATUS_ALLOCATION_FAILED)) {
    ember_status = Status::alloc_failed;
    hint = "; the GPU is out of memory: drop tensors or lower the batch size";
  } else if ((lib == "cuBLAS" && status == CUBLAS_STATUS_ARCH_MISMATCH) ||
             (lib == "cuRAND" && status == CURAND_STATUS_ARCH_MISMATCH)) {
    ember_status = Status::arch_mismatch;
    hint = "; the GPU lacks a feature this call needs (check CMAKE_CUDA_ARCHITECTURES and the GPU)";
  }
  ::ember::detail::throw_error(
      ember_status, file, line,
      ::ember::detail::concat(library, " error: ", call, " failed with status ", status, " (",
                              status_name ? status_name : "", ") at ", file, ":", line, hint));
}

}  // namespace detail

// ---- the device error flag
// ------------------------------------------------------------------------
namespace {

// The flag buffer and the private stream that reads it. The stream is non-blocking, so reading the
// flag never waits for (or is ordered after) the user's streams: callers synchronize those first.
struct DeviceErrorState {
  std::once_flag once;
  std::atomic<int*> flag{nullptr};
  cudaStream_t check_stream = nullptr;
};

DeviceErrorState& device_error_state(int device) {
  // Leaked on purpose: kernels may still hold the flag while static destructors run.
  static DeviceErrorState* states = new DeviceErrorState[size_t(std::max(device_count(), 1))];
  return states[device];
}

}  // namespace

int* device_error_flag(int device) {
  check_device(Device::cuda(device));
  DeviceErrorState& state = device_error_state(device);
  if (int* flag = state.flag.load(std::memory_order_acquire)) return flag;
  std::call_once(state.once, [&] {
    DeviceGuard on_device(Device::cuda(device));  // the buffer and stream belong to `device`
    // Made outside any captured stream's order: relaxed mode lets a global-mode capture elsewhere
    // tolerate the cudaMalloc and the sync.
    RelaxedCaptureModeGuard relaxed;
    cudaStream_t stream = nullptr;
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void* buffer = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&buffer, sizeof(DeviceErrorRecord)));
    EMBER_CUDA_CHECK(cudaMemsetAsync(buffer, 0, sizeof(DeviceErrorRecord), stream));
    // Kernels on other streams may use the flag right after this returns: the zeros must be there.
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
    state.check_stream = stream;
    state.flag.store(static_cast<int*>(buffer), std::memory_order_release);
  });
  return state.flag.load(std::memory_order_acquire);
}

void check_device_errors(int device) {
  check_device(Device::cuda(device));
  DeviceErrorState& state = device_error_state(device);
  int* flag = state.flag.load(std::memory_order_acquire);
  if (flag == nullptr) return;  // no kernel has been given the flag yet
  // Reading is a host sync: during a capture it would invalidate the graph being captured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(
      static_cast<cudaStream_t>(current_stream(Device::cuda(device)).handle), &capture));
  EMBER_CHECK_STATUS(capture == cudaStreamCaptureStatusNone, not_supported, "check_device_errors(",
                     device, "): the current stream of cuda:", device,
                     " is being captured as a CUDA graph; device errors can only be checked at a "
                     "synchronization point outside the capture (item(), copies to the CPU and "
                     "synchronize are not capturable)");
  DeviceErrorRecord record{};
  // To pageable memory, so the copy has completed when the call returns.
  EMBER_CUDA_CHECK(
      cudaMemcpyAsync(&record, flag, sizeof(record), cudaMemcpyDeviceToHost, state.check_stream));
  if (record.code == kDeviceErrorNone) return;
  EMBER_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(DeviceErrorRecord), state.check_stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(state.check_stream));
  EMBER_THROW(bad_param, "a CUDA kernel on cuda:", device, " rejected its input: ",
              describe_device_error(record.code, record.details[0], record.details[1]),
              ". Kernels report such errors asynchronously, so the failing op ran before this "
              "synchronization point (item(), a copy to the CPU or synchronize); check the index "
              "tensors given to indexing ops (index_select, gather, scatter_add, embedding, "
              "cross_entropy targets), or run the same code on the CPU to get the error at the op");
}

#else  // !EMBER_WITH_CUDA

int* device_error_flag(int device) {
  EMBER_THROW(not_supported, "device_error_flag(", device,
              "): this build of Ember has no CUDA (it was built without nvcc)");
}

void check_device_errors(int device) {
  EMBER_THROW(not_supported, "check_device_errors(", device,
              "): this build of Ember has no CUDA (it was built without nvcc)");
}

#endif  // EMBER_WITH_CUDA

}  // namespace ember::cuda
