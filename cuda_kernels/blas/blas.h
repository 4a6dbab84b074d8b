// cuBLAS access for Ember's CUDA code: one handle per (device, thread), bound on every call to the
// current stream and to a workspace owned by that (handle, stream) pair, so cuBLAS calls are
// ordered with Ember's kernels, never share scratch memory across streams, and can be captured in
// CUDA graphs. Include only from sources compiled with CUDA (cuda_kernels/).
#pragma once
#include <cublas_v2.h>

namespace ember::cuda {

// The cuBLAS handle of the current CUDA device for the calling thread, created on first use, with
// the current stream and its workspace already set: call it right before each cuBLAS call (do
// not cache the result across stream changes). Math mode: fp32 accumulation for f16/bf16 GEMMs
// (reduced-precision split-K reductions disallowed); TF32 is chosen per call by compute type.
// The first call on a (thread, stream) allocates a 32 MiB workspace from Ember's allocator; do it
// once eagerly before capturing that stream in a CUDA graph, as warm-up steps do.
cublasHandle_t cublas_handle();

}  // namespace ember::cuda
