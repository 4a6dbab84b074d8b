// The CPU backend's one GEMM entry: row-major C = alpha * op(A) @ op(B) + beta * C in float or
// double, through OpenBLAS (cblas_sgemm / cblas_dgemm) when the build found it, through Eigen's
// GEMM otherwise. matmul/linear (cpu_kernels/linalg.cpp), the RNN and im2col convolution call it.
//
// Threads: OpenBLAS keeps its own pthread pool, and its thread count is global to the process.
// Before each GEMM the entry brings OpenBLAS's count to Ember's get_num_threads() (so
// set_num_threads and EMBER_NUM_THREADS govern the BLAS too). A GEMM called inside a parallel
// region (in_parallel_region(): a parallel_for body, or a data loader worker's
// InlineParallelScope) runs on Eigen's one-thread GEMM instead. OpenBLAS's count is one global
// (Debian's 0.3.21 has no per-call or per-thread count), so such a call would start OpenBLAS's
// threads on top of the pool's, and its threaded level-3 driver holds one process-wide lock, so
// concurrent calls from several workers would also queue behind each other. Both libraries give
// the same result up to floating-point reassociation.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/gemm.h"

namespace ember::cpu {

// The library a CPU GEMM runs on (outside parallel regions; inside, always Eigen).
enum class GemmLibrary { openblas, eigen };

// Whether this build links OpenBLAS.
bool gemm_has_openblas();
// The library in use: OpenBLAS when built with it, unless the environment variable
// EMBER_CPU_GEMM=eigen was set when the library loaded (or set_gemm_library chose Eigen).
GemmLibrary gemm_library();
// Chooses the library (tests compare the two). Choosing OpenBLAS in a build without it raises
// ember::Error(not_supported).
void set_gemm_library(GemmLibrary library);

// C = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when trans_*. A is stored
// m x k (k x m when trans_a) with leading dim lda, B k x n (n x k when trans_b) with ldb, C m x n
// with ldc. C is not read when beta == 0 (it may hold NaN). Any of m, n, k may be 0.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                  int64_t, const double*, int64_t, double, double*, int64_t);

// The batched GEMM of kernel_interface/gemm.h (batch entries stride_* elements apart) for
// float32 and float64; the batch is a loop of gemm() calls.
void gemm_batched_native(const GemmArgs& args);

}  // namespace ember::cpu
