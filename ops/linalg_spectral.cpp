// linalg.qr, eigh / eigvalsh, svd / svdvals and lstsq: checks and shapes, the Eigen kernels of
// kernel_interface/linalg.h on a [batch, rows, cols] view, and the backward formulas of PyTorch
// (through differentiable ops). With mT = transpose of the last two dims:
//   qr (m >= n; reduced, or complete with m == n):
//     M = gR R^T - Q^T gQ;  gA = (Q symadj(triu(M)) + gQ) R^-T,  symadj(X) = X + X^T, half diag
//   eigh: gA = V (diag(gL) + (V^T gV) / E) V^T,  E_ij = L_j - L_i (0 where i == j)
//   svd (A = U S Vh, k = min(m, n) singular values):
//     J = (skew(U^T gU) S_j + S_i skew(V^T gV)) / (S_j^2 - S_i^2) + diag(gS), skew(X) = X - X^T,
//     gA = U J Vh, plus (I - U U^T) gU S^-1 Vh when m > k, U S^-1 gV^T (I - V V^T) when n > k.
// Degenerate cases, as PyTorch documents them: the gradients of eigh and svd are infinite/NaN
// for repeated eigenvalues / singular values (and svd's for zero singular values when U or V
// receive gradient); they are gauge-invariant only for losses that do not depend on the signs
// of the vectors. svd with full_matrices uses only the first k columns of U / rows of Vh in
// backward (the others are not unique). qr's backward with more columns than rows, or
// complete mode with m > n, raises (the latter is not differentiable, as in PyTorch); mode "r"
// is not differentiable.
#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/linalg.h"
#include "ember/ops/linalg_internal.h"

namespace ember {

using Grads = std::vector<Tensor>;
using linalg_detail::as_batch3;
using linalg_detail::batch_shape;
using linalg_detail::check_matrix_input;
using linalg_detail::mT;
using linalg_detail::with_matrix;

namespace {

Tensor zero_if_undefined(const Tensor& g, const Tensor& like) {
  return g.defined() ? g : zeros_like(like);
}

// E_ij = v_j - v_i off the diagonal, 1 on it (the divisor of the eigh / svd formulas).
Tensor pairwise_gaps(const Tensor& v) {
  Tensor e = sub(v.unsqueeze(-2), v.unsqueeze(-1));
  return add(e, diag_embed(ones_like(v)));
}

Tensor off_diagonal(const Tensor& x) { return sub(x, diag_embed(x.diagonal(0, -2, -1))); }

}  // namespace

namespace linalg {

QR qr(const Tensor& a, const std::string& mode) {
  const char* op = "linalg.qr";
  check_matrix_input(op, a, false);
  EMBER_CHECK(mode == "reduced" || mode == "complete" || mode == "r", op, ": mode must be ",
              "'reduced', 'complete' or 'r', got '", mode, "'");
  const Shape batch = batch_shape(a);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const int64_t qc = mode == "complete" ? m : k;
  Tensor a3 = as_batch3(a);
  Tensor q = mode == "r" ? Tensor() : empty({a3.size(0), m, qc}, a.dtype(), a.device());
  Tensor r = empty({a3.size(0), qc, n}, a.dtype(), a.device());
  linalg_qr_kernel().get(a.device().type, a.dtype())(q, r, a3);
  if (q.defined()) q = q.reshape(with_matrix(batch, m, qc));
  r = r.reshape(with_matrix(batch, qc, n));
  if (autograd::needs_grad({&a})) {
    if (mode == "r") {
      // R alone is not differentiable (PyTorch raises on backward, as here).
      autograd::record_backward(op, {a}, {&r}, [](const Grads&, const auto&) -> Grads {
        EMBER_THROW(not_supported,
                    "linalg.qr: mode='r' does not compute Q, which the gradient "
                    "needs; use mode='reduced'");
      });
      return {q, r};
    }
    autograd::SavedTensor sq(q, op), sr(r, op);
    autograd::record_backward(op, {a}, {&q, &r}, [sq, sr, m, n, mode](const Grads& g, const auto&) {
      EMBER_CHECK(m >= n && (mode == "reduced" || m == n), "linalg.qr: backward is ",
                  m < n ? "not implemented for inputs with more columns than rows"
                        : "not defined for mode='complete' with more rows than columns",
                  " (input ", m, " x ", n, ")");
      Tensor Q = sq.unpack(), R = sr.unpack();
      Tensor gq = zero_if_undefined(g[0], Q), gr = zero_if_undefined(g[1], R);
      Tensor mm_ = sub(matmul(gr, mT(R)), matmul(mT(Q), gq));
      Tensor t = triu(mm_);
      Tensor sym = sub(add(t, mT(t)), diag_embed(t.diagonal(0, -2, -1)));
      Tensor ga = add(matmul(Q, sym), gq);
      return Grads{matmul(ga, mT(inv(R)))};
    });
  }
  return {q, r};
}

Eigh eigh(const Tensor& a, const std::string& uplo) {
  const char* op = "linalg.eigh";
  check_matrix_input(op, a, true);
  EMBER_CHECK(uplo == "L" || uplo == "U", op, ": uplo must be 'L' or 'U', got '", uplo, "'");
  const Shape batch = batch_shape(a);
  const int64_t n = a.size(-1);
  // The kernel reads the lower triangle; the upper one is the lower triangle of A^T.
  Tensor a3 = as_batch3(uplo == "L" ? a : mT(a));
  Tensor w = empty({a3.size(0), n}, a.dtype(), a.device());
  Tensor v = empty({a3.size(0), n, n}, a.dtype(), a.device());
  linalg_eigh_kernel().get(a.device().type, a.dtype())(w, v, a3);
  Shape wshape = batch;
  wshape.push_back(n);
  w = w.reshape(wshape);
  v = v.reshape(with_matrix(batch, n, n));
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor sw(w, op), sv(v, op);
    autograd::record_backward(op, {a}, {&w, &v}, [sw, sv](const Grads& g, const auto&) {
      Tensor L = sw.unpack(), V = sv.unpack();
      Tensor inner = g[0].defined() ? diag_embed(g[0]) : zeros_like(V);
      if (g[1].defined())
        inner = add(inner, off_diagonal(div(matmul(mT(V), g[1]), pairwise_gaps(L))));
      return Grads{matmul(matmul(V, inner), mT(V))};
    });
  }
  return {w, v};
}

Tensor eigvalsh(const Tensor& a, const std::string& uplo) { return eigh(a, uplo).eigenvalues; }

SVD svd(const Tensor& a, bool full_matrices) {
  const char* op = "linalg.svd";
  check_matrix_input(op, a, false);
  const Shape batch = batch_shape(a);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const int64_t uc = full_matrices ? m : k, vr = full_matrices ? n : k;
  Tensor a3 = as_batch3(a);
  Tensor u = empty({a3.size(0), m, uc}, a.dtype(), a.device());
  Tensor s = empty({a3.size(0), k}, a.dtype(), a.device());
  Tensor vh = empty({a3.size(0), vr, n}, a.dtype(), a.device());
  linalg_svd_kernel().get(a.device().type, a.dtype())(u, s, vh, a3);
  Shape sshape = batch;
  sshape.push_back(k);
  u = u.reshape(with_matrix(batch, m, uc));
  s = s.reshape(sshape);
  vh = vh.reshape(with_matrix(batch, vr, n));
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor su(u, op), ss(s, op), svh(vh, op);
    autograd::record_backward(
        op, {a}, {&u, &s, &vh}, [su, ss, svh, m, n, k](const Grads& g, const auto&) {
          // Only the first k columns of U / rows of Vh enter the formula.
          Tensor U = su.unpack().narrow(-1, 0, k), S = ss.unpack();
          Tensor Vh = svh.unpack().narrow(-2, 0, k), V = mT(Vh);
          Tensor gU = g[0].defined() ? g[0].narrow(-1, 0, k) : Tensor();
          Tensor gV = g[2].defined() ? mT(g[2].narrow(-2, 0, k)) : Tensor();
          Tensor Si = S.unsqueeze(-1), Sj = S.unsqueeze(-2);
          Tensor E = pairwise_gaps(mul(S, S));
          Tensor J = g[1].defined() ? diag_embed(g[1])
                                    : zeros(with_matrix(batch_shape(U), k, k),
                                            TensorOptions(S.dtype()).with_device(S.device()));
          if (gU.defined()) {
            Tensor x = matmul(mT(U), gU);
            J = add(J, div(mul(sub(x, mT(x)), Sj), E));
          }
          if (gV.defined()) {
            Tensor x = matmul(mT(V), gV);
            J = add(J, div(mul(Si, sub(x, mT(x))), E));
          }
          Tensor gA = matmul(matmul(U, J), Vh);
          if (m > k && gU.defined()) {
            Tensor gus = div(gU, Sj);  // gU S^-1
            gA = add(gA, matmul(sub(gus, matmul(U, matmul(mT(U), gus))), Vh));
          }
          if (n > k && gV.defined()) {
            Tensor gvs = div(gV, Sj);  // gV S^-1
            gA = add(gA, matmul(U, mT(sub(gvs, matmul(V, matmul(Vh, gvs))))));
          }
          return Grads{gA};
        });
  }
  return {u, s, vh};
}

Tensor svdvals(const Tensor& a) { return svd(a, false).S; }

Lstsq lstsq(const Tensor& a, const Tensor& b) {
  const char* op = "linalg.lstsq";
  check_matrix_input(op, a, false);
  EMBER_CHECK(b.defined() && b.dtype() == a.dtype() && b.device() == a.device(), op,
              ": B must be defined and share A's dtype and device");
  const int64_t m = a.size(-2), n = a.size(-1);
  const bool vector_rhs = b.dim() == a.dim() - 1;
  Tensor bm = vector_rhs ? b.unsqueeze(-1) : b;
  EMBER_CHECK(bm.dim() >= 2 && bm.size(-2) == m, op, ": A of shape ", a.shape_str(),
              " and B of shape ", b.shape_str(), " are incompatible (B needs ", m, " rows)");
  Tensor x;
  if (m >= n) {  // A = Q R: X = R^-1 Q^T B
    QR f = qr(a, "reduced");
    x = solve(f.R, matmul(mT(f.Q), bm));
  } else {  // A^T = Q R, A = R^T Q^T: the minimum-norm X = Q R^-T B
    QR f = qr(mT(a), "reduced");
    x = matmul(f.Q, solve(mT(f.R), bm));
  }
  return {vector_rhs ? x.squeeze(-1) : x};
}

}  // namespace linalg

}  // namespace ember
