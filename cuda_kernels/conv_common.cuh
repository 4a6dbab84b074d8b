// Device-side helpers shared by the CUDA conv2d algorithms: the dtype switch over exactly the
// types an algorithm instantiates (a generic lambda receives a value of the device type, so no
// other instantiation is compiled). Include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_kernels/conv_common.h"
#include "cuda_kernels/elementwise.cuh"

namespace ember::cuda::conv {

// f(T{}) with T the device type of `dtype` among float, __half, __nv_bfloat16 (and double when
// with_f64); any other dtype is an internal error (applies() keeps them out).
template <bool with_f64 = false, typename F>
void dispatch_conv_dtype(DType dtype, const char* algorithm, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::f16: f(__half{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::f64:
      if constexpr (with_f64) {
        f(double{});
        return;
      }
      break;
    default: break;
  }
  EMBER_THROW(internal, "conv2d ", algorithm, ": dtype ", dtype_name(dtype),
              " reached a kernel that does not support it");
}

}  // namespace ember::cuda::conv
