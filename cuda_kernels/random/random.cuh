// CUDA random numbers: the launchers that keep a CUDA graph's Philox offset on the device (used by
// tensor/runtime/generator.cpp) and a cuRAND reference for the tests. The random_kernel fill itself
// is registered from random.cu and reached through the kernel table (kernel_interface/).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::cuda {

// For tests: what cuRAND itself returns for each group g < groups right after
// curand_init(seed, g, offset): curand4 into bits[4g..4g+3], curand_uniform4 into uniforms[..] and
// curand_normal4 into normals[..] (each from a fresh init; all pointers 16-byte aligned device
// memory). random_kernel computes these with tensor/philox.h and must match them bit for bit.
void philox_curand_reference(uint32_t* bits, float* uniforms, float* normals, int64_t groups,
                             uint64_t seed, uint64_t offset, cudaStream_t stream);

}  // namespace ember::cuda
