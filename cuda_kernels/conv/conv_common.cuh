// Device-side helpers shared by the CUDA conv2d algorithms: the dtype switch over exactly the
// types an algorithm instantiates (a generic lambda receives a value of the device type, so no
// other instantiation is compiled; elementwise.cuh's dispatch_floating), and the reduction that
// ends a split-K GEMM. Include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <utility>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/conv/conv.h"

namespace ember::cuda::conv {

// f(T{}) with T the device type of `dtype` among float, __half, __nv_bfloat16 (and double when
// with_f64): dispatch_floating under the algorithm's name (applies() keeps other dtypes out).
template <bool with_f64 = false, typename F>
void dispatch_conv_dtype(DType dtype, const char* algorithm, F&& f) {
  constexpr FloatingTypes types = with_f64 ? FloatingTypes::all : FloatingTypes::no_f64;
  dispatch_floating<types>(dtype, "conv2d", algorithm, std::forward<F>(f));
}

// The deterministic end of a split-K GEMM: out[r * out_row + c * out_col] = the sum, in split
// order, of partial[(s * rows + r) * cols + c] over s < splits (fp32 partials, T output).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    sum_split_partials_kernel(const float* __restrict__ partial, int64_t splits, int64_t rows,
                              int64_t cols, int64_t out_row, int64_t out_col, T* __restrict__ out) {
  const int64_t total = rows * cols;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    float sum = 0.f;
    for (int64_t s = 0; s < splits; ++s) sum += partial[s * total + i];
    const int64_t r = i / cols, c = i - r * cols;
    out[r * out_row + c * out_col] = convert<T>(sum);
  }
}

template <typename T>
void sum_split_partials(const float* partial, int64_t splits, int64_t rows, int64_t cols,
                        int64_t out_row, int64_t out_col, T* out, Device device) {
  const int64_t total = rows * cols;
  const unsigned blocks = grid_for(total, device.index);
  sum_split_partials_kernel<T><<<blocks, kBlockThreads, 0, stream_of(device)>>>(
      partial, splits, rows, cols, out_row, out_col, out);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace ember::cuda::conv
