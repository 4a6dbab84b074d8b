// The GEMM kernel interface: row-major batched matrix multiply (cuBLAS on CUDA; OpenBLAS, or Eigen
// without it, on the CPU).
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Row-major batched GEMM: C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], op = transpose when
// trans_*. Leading dims and batch strides in elements; A, B, C of one dtype (f16/bf16 accumulate
// in fp32). allow_tf32 lets fp32 GEMMs use TF32 tensor cores.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  DType dtype = DType::f32;
  Device device;
  bool allow_tf32 = false;
};
using GemmKernel = void (*)(const GemmArgs& args);
EMBER_DECLARE_KERNEL(gemm_kernel, GemmKernel)

}  // namespace ember
