// linalg.inv, solve, cholesky, det, slogdet (+ the torch aliases inverse, det, slogdet, logdet):
// checks and shapes, the Eigen kernels of kernel_interface/linalg.h on a [batch, n, n] view, and
// the backward formulas (through differentiable ops, so they also have double backward):
//   inv:      Y = A^-1,          gA = -Y^T g Y^T
//   solve:    X = A^-1 B,        gB = solve(A^T, g), gA = -gB X^T
//   cholesky: A = L L^T,         gA = sym(L^-T phi(L^T gL) L^-1), phi = lower triangle, half diag
//   slogdet:  (sign, log|det A|), g_logabsdet * A^-T (sign has no gradient)
//   det:      sign * exp(logabsdet), so gA = g det(A) A^-T.
// Degenerate cases as PyTorch documents them: inv and solve raise for exactly singular inputs;
// the gradient of det / slogdet needs an invertible input (its backward raises otherwise);
// cholesky raises for inputs that are not positive definite; cholesky's gradient is the symmetric
// one (A is assumed symmetric, only its lower triangle is read).
#include <cmath>
#include <limits>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/linalg.h"
#include "ember/ops/linalg_internal.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {

using Grads = std::vector<Tensor>;
using linalg_detail::as_batch3;
using linalg_detail::batch_shape;
using linalg_detail::check_matrix_input;
using linalg_detail::mT;
using linalg_detail::with_matrix;

namespace linalg_detail {

void check_info(const char* op, const std::vector<int64_t>& info, const Shape& batch,
                const char* what) {
  for (size_t b = 0; b < info.size(); ++b) {
    if (info[b] == 0) continue;
    std::string where = batch.empty() ? std::string("the input matrix")
                                      : "matrix " + std::to_string(b) + " (flat index) of the " +
                                            shape_str(batch) + " batch";
    EMBER_CHECK(false, op, ": ", where, " ", what,
                info[b] > 0 ? " (zero pivot " + std::to_string(info[b]) + ")" : std::string());
  }
}

}  // namespace linalg_detail

namespace {

// Cholesky of the lower triangle, recorded as one node.
Tensor cholesky_lower(const Tensor& a) {
  const char* op = "linalg.cholesky";
  const Shape batch = batch_shape(a);
  const int64_t n = a.size(-1);
  Tensor a3 = as_batch3(a);
  Tensor l = empty({a3.size(0), n, n}, a.dtype(), a.device());
  std::vector<int64_t> info(a3.size(0), 0);
  linalg_cholesky_kernel().get(a.device().type, a.dtype())(l, a3, info.data());
  linalg_detail::check_info(op, info, batch,
                            "is not positive-definite; the Cholesky factorisation does not exist");
  l = l.reshape(with_matrix(batch, n, n));
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor sl(l, op);
    autograd::record_backward(op, {a}, {&l}, [sl](const Grads& g, const auto&) {
      Tensor L = sl.unpack();
      Tensor p = matmul(mT(L), g[0]);
      p = tril(p) - mul(diag_embed(p.diagonal(0, -2, -1)), 0.5);
      Tensor linv = linalg::inv(L);
      Tensor s = matmul(matmul(mT(linv), p), linv);
      return Grads{mul(add(s, mT(s)), 0.5)};
    });
  }
  return l;
}

}  // namespace

namespace linalg {

Tensor inv(const Tensor& a) {
  const char* op = "linalg.inv";
  check_matrix_input(op, a, true);
  const Shape batch = batch_shape(a);
  const int64_t n = a.size(-1);
  Tensor a3 = as_batch3(a);
  Tensor y = empty({a3.size(0), n, n}, a.dtype(), a.device());
  std::vector<int64_t> info(a3.size(0), 0);
  linalg_inv_kernel().get(a.device().type, a.dtype())(y, a3, info.data());
  linalg_detail::check_info(op, info, batch, "is singular; the inverse does not exist");
  y = y.reshape(with_matrix(batch, n, n));
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor sy(y, op);
    autograd::record_backward(op, {a}, {&y}, [sy](const Grads& g, const auto&) {
      Tensor yt = mT(sy.unpack());
      return Grads{neg(matmul(matmul(yt, g[0]), yt))};
    });
  }
  return y;
}

Tensor solve(const Tensor& a, const Tensor& b) {
  const char* op = "linalg.solve";
  check_matrix_input(op, a, true);
  EMBER_CHECK(b.defined() && b.dim() >= 1, op, ": B must have at least one dim");
  EMBER_CHECK(b.dtype() == a.dtype() && b.device() == a.device(), op,
              ": A and B must share dtype and device, got ", dtype_name(a.dtype()), " ",
              a.device().str(), " and ", dtype_name(b.dtype()), " ", b.device().str());
  const int64_t n = a.size(-1);
  // B is a vector (batch) when 1-D or shaped like A without its last dim, as torch.linalg.solve.
  const bool vector_rhs =
      b.dim() == 1 ||
      (b.dim() == a.dim() - 1 && Shape(b.sizes()) == Shape(a.sizes().begin(), a.sizes().end() - 1));
  Tensor bm = vector_rhs ? b.unsqueeze(-1) : b;
  EMBER_CHECK(bm.dim() >= 2 && bm.size(-2) == n, op, ": A of shape ", a.shape_str(),
              " and B of shape ", b.shape_str(), " are incompatible (B needs ", n,
              " rows, or to be a vector of size ", n, ")");
  const Shape batch = broadcast_shapes(op, {batch_shape(a), batch_shape(bm)});
  const int64_t k = bm.size(-1);
  Tensor ae = a.expand(with_matrix(batch, n, n)), be = bm.expand(with_matrix(batch, n, k));
  Tensor a3 = as_batch3(ae), b3 = as_batch3(be);
  Tensor x = empty({a3.size(0), n, k}, a.dtype(), a.device());
  std::vector<int64_t> info(a3.size(0), 0);
  linalg_solve_kernel().get(a.device().type, a.dtype())(x, a3, b3, info.data());
  linalg_detail::check_info(op, info, batch, "is singular; the system has no unique solution");
  x = x.reshape(with_matrix(batch, n, k));
  if (autograd::needs_grad({&ae, &be})) {
    autograd::SavedTensor sa(ae, op), sx(x, op);
    autograd::record_backward(op, {ae, be}, {&x}, [sa, sx](const Grads& g, const auto& node) {
      Grads r(2);
      Tensor gb = solve(mT(sa.unpack()), g[0]);
      if (node.needs_input_grad(0)) r[0] = neg(matmul(gb, mT(sx.unpack())));
      if (node.needs_input_grad(1)) r[1] = gb;
      return r;
    });
  }
  return vector_rhs ? x.squeeze(-1) : x;
}

Tensor cholesky(const Tensor& a, bool upper) {
  check_matrix_input("linalg.cholesky", a, true);
  // The upper factor of A is the transposed lower factor of A^T (whose lower triangle is A's
  // upper one).
  return upper ? mT(cholesky_lower(mT(a))) : cholesky_lower(a);
}

SignLogAbsDet slogdet(const Tensor& a) {
  const char* op = "linalg.slogdet";
  check_matrix_input(op, a, true);
  const Shape batch = batch_shape(a);
  Tensor a3 = as_batch3(a);
  Tensor sign = empty({a3.size(0)}, a.dtype(), a.device());
  Tensor logabs = empty({a3.size(0)}, a.dtype(), a.device());
  linalg_slogdet_kernel().get(a.device().type, a.dtype())(sign, logabs, a3);
  sign = sign.reshape(batch);
  logabs = logabs.reshape(batch);
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor sa(a, op);
    autograd::record_backward(op, {a}, {&logabs}, [sa](const Grads& g, const auto&) {
      // d log|det A| = tr(A^-1 dA): the gradient is A^-T; it does not exist for singular A.
      Tensor ainv_t = mT(inv(sa.unpack()));
      return Grads{mul(g[0].unsqueeze(-1).unsqueeze(-1), ainv_t)};
    });
  }
  return {sign, logabs};
}

Tensor det(const Tensor& a) {
  SignLogAbsDet s = linalg::slogdet(a);
  return mul(s.sign, exp(s.logabsdet));
}

}  // namespace linalg

Tensor inverse(const Tensor& a) { return linalg::inv(a); }
Tensor det(const Tensor& a) { return linalg::det(a); }
std::tuple<Tensor, Tensor> slogdet(const Tensor& a) {
  linalg::SignLogAbsDet s = linalg::slogdet(a);
  return {s.sign, s.logabsdet};
}
Tensor logdet(const Tensor& a) {
  linalg::SignLogAbsDet s = linalg::slogdet(a);
  // log(det A): NaN where det < 0, -inf where det == 0 (as torch.logdet).
  Tensor nan = full_like(s.logabsdet, std::numeric_limits<double>::quiet_NaN());
  return where(lt(s.sign, zeros_like(s.sign)), nan, s.logabsdet);
}

Tensor Tensor::inverse() const { return ::ember::inverse(*this); }
Tensor Tensor::det() const { return ::ember::det(*this); }
std::tuple<Tensor, Tensor> Tensor::slogdet() const { return ::ember::slogdet(*this); }
Tensor Tensor::logdet() const { return ::ember::logdet(*this); }

}  // namespace ember
