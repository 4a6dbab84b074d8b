// Linear algebra beyond the matrix products of ops/ops.h: vector/matrix products (mv, dot, outer,
// addmv, baddbmm, addbmm, kron, tensordot, einsum; ops/linalg_products.cpp, linalg_einsum.cpp)
// and the decompositions of torch.linalg in namespace ember::linalg (ops/linalg_decomp.cpp,
// linalg_spectral.cpp, linalg_norms.cpp). The decompositions run on the CPU through Eigen, batched
// over the leading dims, in float32 and float64; on CUDA they raise ember::Error(not_supported)
// (no cuSOLVER path yet) rather than copying to the host behind the caller's back.
#pragma once
#include <string>
#include <tuple>
#include <variant>

#include "ember/tensor/tensor.h"

namespace ember {

// ---- products (ops/linalg_products.cpp); every one is differentiable through its composition ----
Tensor mv(const Tensor& mat, const Tensor& vec);  // [n, m] @ [m] -> [n]
Tensor dot(const Tensor& a, const Tensor& b);     // 1-D . 1-D -> 0-D
Tensor outer(const Tensor& a, const Tensor& b);   // [n], [m] -> [n, m]
Tensor ger(const Tensor& a, const Tensor& b);     // alias of outer
Tensor addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, double beta = 1,
             double alpha = 1);
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta = 1,
               double alpha = 1);
Tensor addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta = 1,
              double alpha = 1);
Tensor kron(const Tensor& a, const Tensor& b);
// Contracts the last `dims` dims of a with the first `dims` dims of b.
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
// Contracts dims_a[i] of a with dims_b[i] of b.
Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b);
// torch.einsum: "ij,jk->ik", implicit output (no "->"), repeated subscripts (diagonals),
// "..." broadcasting; any number of operands (contracted left to right).
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

namespace linalg {

// ---- inverse, solve, cholesky, determinants (ops/linalg_decomp.cpp) ----
// All take [..., n, n] (A) inputs. inv / solve raise ember::Error for exactly singular inputs
// (a zero pivot of the LU factorisation), cholesky for inputs that are not positive definite.
Tensor inv(const Tensor& a);
// X with A X = B; B is [..., n, k] or a vector [..., n] (when B.dim() == 1 or B's shape is A's
// without the last dim); batch dims broadcast.
Tensor solve(const Tensor& a, const Tensor& b);
// Lower (default) or upper Cholesky factor; only the lower (upper) triangle of A is read.
Tensor cholesky(const Tensor& a, bool upper = false);
Tensor det(const Tensor& a);
// What slogdet returns: det = sign * exp(logabsdet), without overflow for large matrices.
struct SignLogAbsDet {
  Tensor sign,    // [..] the sign of the determinant: -1, 0 or 1
      logabsdet;  // [..] log |det|; -inf for a singular matrix
};
SignLogAbsDet slogdet(const Tensor& a);

// ---- QR, eigh, SVD (ops/linalg_spectral.cpp) ----
// What qr returns: A = Q R.
struct QR {
  Tensor Q,  // orthonormal columns (undefined for mode "r")
      R;     // upper triangular
};
// mode "reduced" (Q [.., m, k], R [.., k, n], k = min(m, n)), "complete" (Q [.., m, m]) or "r"
// (R only, Q undefined; not differentiable, as PyTorch).
QR qr(const Tensor& a, const std::string& mode = "reduced");
// What eigh returns: A = V diag(eigenvalues) V^T.
struct Eigh {
  Tensor eigenvalues,  // [.., n], ascending
      eigenvectors;    // [.., n, n], orthonormal, column j belongs to eigenvalues[j]
};
// Eigenvalues in ascending order and orthonormal eigenvectors (columns) of a symmetric matrix;
// reads the lower ("L") or upper ("U") triangle.
Eigh eigh(const Tensor& a, const std::string& uplo = "L");
Tensor eigvalsh(const Tensor& a, const std::string& uplo = "L");
// What svd returns: A = U diag(S) Vh, k = min(m, n).
struct SVD {
  Tensor U,  // [.., m, k] ([.., m, m] with full_matrices), orthonormal columns
      S,     // [.., k] singular values, descending
      Vh;    // [.., k, n] ([.., n, n] with full_matrices), orthonormal rows
};
// A = U diag(S) Vh, S descending. full_matrices gives square U [.., m, m] and Vh [.., n, n].
SVD svd(const Tensor& a, bool full_matrices = true);
Tensor svdvals(const Tensor& a);
struct Lstsq {
  Tensor solution;
};
// Least squares min ||A X - B|| for full-rank A [.., m, n] (m >= n), or the minimum-norm solution
// of the underdetermined system (m < n); B is [.., m, k]. Computed through the QR factorisation.
Lstsq lstsq(const Tensor& a, const Tensor& b);

// ---- norms (ops/linalg_norms.cpp) ----
// ord: "fro", "nuc", or a number 1, -1, 2, -2, +-infinity, over dims (-2, -1) by default.
using NormOrd = std::variant<double, std::string>;
Tensor matrix_norm(const Tensor& a, const NormOrd& ord = std::string("fro"),
                   const Shape& dims = {-2, -1}, bool keepdim = false);
Tensor vector_norm(const Tensor& a, double ord = 2, const Shape& dims = {}, bool keepdim = false);

}  // namespace linalg

// torch-style aliases.
Tensor inverse(const Tensor& a);                      // linalg::inv
Tensor det(const Tensor& a);                          // linalg::det
std::tuple<Tensor, Tensor> slogdet(const Tensor& a);  // (sign, logabsdet)
Tensor logdet(const Tensor& a);  // log(det): NaN for negative det, -inf for zero

}  // namespace ember
