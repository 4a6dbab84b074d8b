// Status checks for every CUDA runtime, cuBLAS, cuRAND, cuFFT and NCCL call and every kernel
// launch. Include only from files compiled with CUDA (cuda_kernels/, or .cpp guarded by
// EMBER_WITH_CUDA). A failure throws ember::Error(execution_failed, or alloc_failed for
// out-of-memory) naming the call, the status string, and the file:line.
#pragma once
#include <cuda_runtime_api.h>

#include "ember/tensor/error.h"

namespace ember::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_library_error(const char* library, int status, const char* status_name,
                                      const char* call, const char* file, int line);
}  // namespace ember::cuda::detail

#define EMBER_CUDA_CHECK(call)                                                        \
  do {                                                                                \
    cudaError_t ember_err_ = (call);                                                  \
    if (ember_err_ != cudaSuccess) [[unlikely]]                                       \
      ::ember::cuda::detail::throw_cuda_error(ember_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After every <<<...>>> launch.
#define EMBER_CUDA_LAUNCH_CHECK() EMBER_CUDA_CHECK(cudaGetLastError())

#define EMBER_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                            \
    cublasStatus_t ember_st_ = (call);                                                            \
    if (ember_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                          \
      ::ember::cuda::detail::throw_library_error(                                                 \
          "cuBLAS", int(ember_st_), cublasGetStatusString(ember_st_), #call, __FILE__, __LINE__); \
  } while (0)

#define EMBER_CURAND_CHECK(call)                                                                \
  do {                                                                                          \
    curandStatus_t ember_st_ = (call);                                                          \
    if (ember_st_ != CURAND_STATUS_SUCCESS) [[unlikely]]                                        \
      ::ember::cuda::detail::throw_library_error("cuRAND", int(ember_st_), "", #call, __FILE__, \
                                                 __LINE__);                                     \
  } while (0)

// cuFFT has no status-string function: the message carries the cufftResult number.
#define EMBER_CUFFT_CHECK(call)                                                                \
  do {                                                                                         \
    cufftResult ember_st_ = (call);                                                            \
    if (ember_st_ != CUFFT_SUCCESS) [[unlikely]]                                               \
      ::ember::cuda::detail::throw_library_error("cuFFT", int(ember_st_), "", #call, __FILE__, \
                                                 __LINE__);                                    \
  } while (0)

#define EMBER_NCCL_CHECK(call)                                                               \
  do {                                                                                       \
    ncclResult_t ember_st_ = (call);                                                         \
    if (ember_st_ != ncclSuccess) [[unlikely]]                                               \
      ::ember::cuda::detail::throw_library_error(                                            \
          "NCCL", int(ember_st_), ncclGetErrorString(ember_st_), #call, __FILE__, __LINE__); \
  } while (0)

namespace ember::cuda {

// RAII: this thread's capture mode is relaxed in this scope. A capture in global mode forbids
// "unsafe" calls (cudaMalloc, stream and event creation, synchronizing another stream) from every
// thread; code that makes such calls outside any captured stream's order uses this.
class RelaxedCaptureModeGuard {
 public:
  RelaxedCaptureModeGuard() { EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureModeGuard() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureModeGuard(const RelaxedCaptureModeGuard&) = delete;
  RelaxedCaptureModeGuard& operator=(const RelaxedCaptureModeGuard&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace ember::cuda
