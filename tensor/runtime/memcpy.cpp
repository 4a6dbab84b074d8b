// Host/device byte copies (CUDA runtime when built with CUDA).
#include "ember/tensor/runtime/memcpy.h"

#include "ember/tensor/error.h"
#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/device_errors.h"
#endif

namespace ember {

#ifdef EMBER_WITH_CUDA
void memcpy_host_to_device(void* dst, const void* src, size_t n, const Stream& s) {
  if (n == 0) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cudaStream_t(s.handle)));
}
void memcpy_device_to_host(void* dst, const void* src, size_t n, const Stream& s) {
  if (n > 0)
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cudaStream_t(s.handle)));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(cudaStream_t(s.handle)));
  cuda::check_device_errors(s.device.index);
}
void memcpy_device_to_device(void* dst, const void* src, size_t n, const Stream& s) {
  if (n == 0) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cudaStream_t(s.handle)));
}
#else
[[noreturn]] static void no_cuda() {
  EMBER_THROW(not_supported,
              "this build of Ember has no CUDA backend; rebuild with nvcc available");
}
void memcpy_host_to_device(void*, const void*, size_t, const Stream&) { no_cuda(); }
void memcpy_device_to_host(void*, const void*, size_t, const Stream&) { no_cuda(); }
void memcpy_device_to_device(void*, const void*, size_t, const Stream&) { no_cuda(); }
#endif

}  // namespace ember
