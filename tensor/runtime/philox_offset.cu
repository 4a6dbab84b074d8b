// The device-side Philox offset of a generator (tensor/runtime/philox_offset.h).
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/philox_offset.h"

namespace ember::cuda {

namespace {
__global__ void philox_offset_set_kernel(uint64_t* base, uint64_t value) { *base = value; }
}  // namespace

void philox_offset_set(uint64_t* base, uint64_t value, cudaStream_t stream) {
  philox_offset_set_kernel<<<1, 1, 0, stream>>>(base, value);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace ember::cuda
