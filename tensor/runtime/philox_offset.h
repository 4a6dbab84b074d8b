// The device-side Philox offset of a generator (tensor/runtime/generator.h): the one kernel the
// runtime launches itself. CUDA builds only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::cuda {

// *base = value, ordered on `stream` (creation, and before each graph replay; never captured).
void philox_offset_set(uint64_t* base, uint64_t value, cudaStream_t stream);

}  // namespace ember::cuda
