// The decomposition kernel tables (kernel_interface/linalg.h), filled by
// cpu_kernels/linalg_decomp.cpp.
#include "ember/kernel_interface/linalg.h"

namespace ember {

EMBER_DEFINE_KERNEL(linalg_inv_kernel, LinalgInvKernel)
EMBER_DEFINE_KERNEL(linalg_solve_kernel, LinalgSolveKernel)
EMBER_DEFINE_KERNEL(linalg_cholesky_kernel, LinalgCholeskyKernel)
EMBER_DEFINE_KERNEL(linalg_slogdet_kernel, LinalgSlogdetKernel)
EMBER_DEFINE_KERNEL(linalg_qr_kernel, LinalgQrKernel)
EMBER_DEFINE_KERNEL(linalg_eigh_kernel, LinalgEighKernel)
EMBER_DEFINE_KERNEL(linalg_svd_kernel, LinalgSvdKernel)

}  // namespace ember
