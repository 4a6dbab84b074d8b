// The decomposition kernel interface (ops/linalg_decomp.cpp, linalg_spectral.cpp): LU inverse and
// solve, Cholesky, log-determinant, QR, symmetric eigendecomposition and SVD of batches of
// matrices. The CPU backend implements them with Eigen (cpu_kernels/linalg_decomp.cpp); no CUDA
// kernels are registered yet (a cuSOLVER family would register here).
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Every tensor argument is dense, row-major contiguous, [batch, rows, cols] (or [batch, len] for
// vectors of values), of one floating dtype, written in full by the kernel. `info` points to
// `batch` host integers: 0 where the matrix factorised, else a positive code (the 1-based index of
// the zero pivot for LU, 1 for a Cholesky that met a non-positive pivot).
using LinalgInvKernel = void (*)(const Tensor& out, const Tensor& a, int64_t* info);
using LinalgSolveKernel = void (*)(const Tensor& x, const Tensor& a, const Tensor& b,
                                   int64_t* info);
// Lower factor L (upper part zeroed) of the lower triangle of a.
using LinalgCholeskyKernel = void (*)(const Tensor& l, const Tensor& a, int64_t* info);
// sign [batch] (0 for singular), logabsdet [batch] (-inf for singular).
using LinalgSlogdetKernel = void (*)(const Tensor& sign, const Tensor& logabsdet, const Tensor& a);
// Householder QR of a [batch, m, n]: q [batch, m, qc], r [batch, qc, n] with qc = m (complete)
// or min(m, n) (reduced). q may be undefined (mode "r").
using LinalgQrKernel = void (*)(const Tensor& q, const Tensor& r, const Tensor& a);
// Eigenvalues ascending [batch, n] and eigenvectors as columns [batch, n, n] of the symmetric
// matrix stored in the lower triangle of a.
using LinalgEighKernel = void (*)(const Tensor& w, const Tensor& v, const Tensor& a);
// a = u diag(s) vh; s [batch, k] descending; u [batch, m, uc], vh [batch, vr, n] with uc = m,
// vr = n (full) or both k = min(m, n).
using LinalgSvdKernel = void (*)(const Tensor& u, const Tensor& s, const Tensor& vh,
                                 const Tensor& a);

EMBER_DECLARE_KERNEL(linalg_inv_kernel, LinalgInvKernel)
EMBER_DECLARE_KERNEL(linalg_solve_kernel, LinalgSolveKernel)
EMBER_DECLARE_KERNEL(linalg_cholesky_kernel, LinalgCholeskyKernel)
EMBER_DECLARE_KERNEL(linalg_slogdet_kernel, LinalgSlogdetKernel)
EMBER_DECLARE_KERNEL(linalg_qr_kernel, LinalgQrKernel)
EMBER_DECLARE_KERNEL(linalg_eigh_kernel, LinalgEighKernel)
EMBER_DECLARE_KERNEL(linalg_svd_kernel, LinalgSvdKernel)

}  // namespace ember
