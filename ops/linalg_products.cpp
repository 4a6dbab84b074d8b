// The vector and batched products of ops/linalg.h: mv, dot, outer, addmv, baddbmm, addbmm, kron
// and tensordot. Each is a composition of differentiable ops (matmul / bmm on the GEMM kernel,
// mul, sum, views), so its backward is the composition's and it runs on every device the GEMM
// kernel has.
#include <algorithm>
#include <numeric>

#include "ember/ops/linalg.h"
#include "ember/ops/ops.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {

namespace {

void check_same_kind(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": undefined input");
  EMBER_CHECK(a.device() == b.device(), op, ": inputs are on different devices (", a.device().str(),
              " and ", b.device().str(), "); move one with .to(device)");
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": inputs have different dtypes (", dtype_name(a.dtype()),
              " and ", dtype_name(b.dtype()), "); convert one with .to(dtype)");
}

// beta * self + alpha * product, with self broadcast to the product's shape (PyTorch ignores self
// when beta is 0, NaNs included).
Tensor add_scaled(const char* op, const Tensor& self, const Tensor& product, double beta,
                  double alpha) {
  EMBER_CHECK(self.defined(), op, ": undefined input");
  EMBER_CHECK(broadcast_shapes(op, {self.sizes(), product.sizes()}) == product.sizes(), op,
              ": input of shape ", self.shape_str(), " does not broadcast to the product's shape ",
              product.shape_str());
  check_same_kind(op, self, product);
  Tensor scaled = alpha == 1 ? product : mul(product, alpha);
  if (beta == 0) return scaled;
  return add(scaled, beta == 1 ? self : mul(self, beta));
}

}  // namespace

Tensor mv(const Tensor& mat, const Tensor& vec) {
  check_same_kind("mv", mat, vec);
  EMBER_CHECK(mat.dim() == 2 && vec.dim() == 1, "mv: expects a 2-D matrix and a 1-D vector, got ",
              mat.shape_str(), " and ", vec.shape_str());
  EMBER_CHECK(mat.size(1) == vec.size(0), "mv: matrix ", mat.shape_str(), " and vector ",
              vec.shape_str(), " cannot be multiplied (", mat.size(1), " != ", vec.size(0), ")");
  return matmul(mat, vec);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_same_kind("dot", a, b);
  EMBER_CHECK(a.dim() == 1 && b.dim() == 1, "dot: expects two 1-D tensors, got ", a.shape_str(),
              " and ", b.shape_str());
  EMBER_CHECK(a.size(0) == b.size(0), "dot: the vectors have different sizes ", a.shape_str(),
              " and ", b.shape_str());
  return matmul(a, b);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_same_kind("outer", a, b);
  EMBER_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expects two 1-D tensors, got ", a.shape_str(),
              " and ", b.shape_str());
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor ger(const Tensor& a, const Tensor& b) { return outer(a, b); }

Tensor addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, double beta, double alpha) {
  check_same_kind("addmv", mat, vec);
  EMBER_CHECK(mat.dim() == 2 && vec.dim() == 1,
              "addmv: expects a 2-D matrix and a 1-D vector, got ", mat.shape_str(), " and ",
              vec.shape_str());
  EMBER_CHECK(mat.size(1) == vec.size(0), "addmv: matrix ", mat.shape_str(), " and vector ",
              vec.shape_str(), " cannot be multiplied");
  return add_scaled("addmv", self, matmul(mat, vec), beta, alpha);
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
               double alpha) {
  check_same_kind("baddbmm", batch1, batch2);
  EMBER_CHECK(batch1.dim() == 3 && batch2.dim() == 3,
              "baddbmm: batch1 and batch2 must be 3-D, got ", batch1.shape_str(), " and ",
              batch2.shape_str());
  EMBER_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1),
              "baddbmm: batch1 ", batch1.shape_str(), " and batch2 ", batch2.shape_str(),
              " cannot be multiplied");
  return add_scaled("baddbmm", self, bmm(batch1, batch2), beta, alpha);
}

Tensor addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
              double alpha) {
  check_same_kind("addbmm", batch1, batch2);
  EMBER_CHECK(batch1.dim() == 3 && batch2.dim() == 3, "addbmm: batch1 and batch2 must be 3-D, got ",
              batch1.shape_str(), " and ", batch2.shape_str());
  EMBER_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1),
              "addbmm: batch1 ", batch1.shape_str(), " and batch2 ", batch2.shape_str(),
              " cannot be multiplied");
  // sum_b A[b] @ B[b] is one GEMM of [n, b*m] @ [b*m, p].
  const int64_t b = batch1.size(0), n = batch1.size(1), m = batch1.size(2), p = batch2.size(2);
  Tensor lhs = batch1.permute({1, 0, 2}).reshape({n, b * m});
  Tensor rhs = batch2.reshape({b * m, p});
  return add_scaled("addbmm", self, mm(lhs, rhs), beta, alpha);
}

Tensor kron(const Tensor& a, const Tensor& b) {
  check_same_kind("kron", a, b);
  const int64_t nd = std::max(a.dim(), b.dim());
  Shape sa(nd - a.dim(), 1), sb(nd - b.dim(), 1);
  sa.insert(sa.end(), a.sizes().begin(), a.sizes().end());
  sb.insert(sb.end(), b.sizes().begin(), b.sizes().end());
  // a as [a0, 1, a1, 1, ..], b as [1, b0, 1, b1, ..]: the product is [a0, b0, a1, b1, ..].
  Shape ia, ib, out;
  for (int64_t d = 0; d < nd; ++d) {
    ia.insert(ia.end(), {sa[d], 1});
    ib.insert(ib.end(), {1, sb[d]});
    out.push_back(sa[d] * sb[d]);
  }
  return mul(a.reshape(ia), b.reshape(ib)).reshape(out);
}

Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b) {
  check_same_kind("tensordot", a, b);
  EMBER_CHECK(dims_a.size() == dims_b.size(), "tensordot: dims_a ", shape_str(dims_a),
              " and dims_b ", shape_str(dims_b), " must have the same length");
  std::vector<bool> used_a(a.dim()), used_b(b.dim());
  Shape perm_a, perm_b, out_shape;
  int64_t k = 1;
  Shape ca, cb;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    const int64_t da = wrap_dim(dims_a[i], a.dim(), "tensordot");
    const int64_t db = wrap_dim(dims_b[i], b.dim(), "tensordot");
    EMBER_CHECK(!used_a[da] && !used_b[db], "tensordot: a dim is listed twice in ",
                shape_str(dims_a), " / ", shape_str(dims_b));
    used_a[da] = used_b[db] = true;
    EMBER_CHECK(a.size(da) == b.size(db), "tensordot: contracted dim ", da, " of a ", a.shape_str(),
                " has size ", a.size(da), " but dim ", db, " of b ", b.shape_str(), " has size ",
                b.size(db));
    ca.push_back(da);
    cb.push_back(db);
    k *= a.size(da);
  }
  int64_t fa = 1, fb = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!used_a[d]) {
      perm_a.push_back(d);
      out_shape.push_back(a.size(d));
      fa *= a.size(d);
    }
  perm_a.insert(perm_a.end(), ca.begin(), ca.end());
  perm_b = cb;
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!used_b[d]) {
      perm_b.push_back(d);
      out_shape.push_back(b.size(d));
      fb *= b.size(d);
    }
  Tensor lhs = a.permute(perm_a).reshape({fa, k});
  Tensor rhs = b.permute(perm_b).reshape({k, fb});
  return mm(lhs, rhs).reshape(out_shape);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  EMBER_CHECK(dims >= 0 && dims <= a.dim() && dims <= b.dim(), "tensordot: dims = ", dims,
              " must be in [0, min(a.dim(), b.dim())] for a ", a.shape_str(), " and b ",
              b.shape_str());
  Shape da(dims), db(dims);
  std::iota(da.begin(), da.end(), a.dim() - dims);
  std::iota(db.begin(), db.end(), 0);
  return tensordot(a, b, da, db);
}

// Tensor methods (declared in tensor/tensor.h).
Tensor Tensor::mv(const Tensor& vec) const { return ::ember::mv(*this, vec); }
Tensor Tensor::dot(const Tensor& other) const { return ::ember::dot(*this, other); }
Tensor Tensor::outer(const Tensor& other) const { return ::ember::outer(*this, other); }
Tensor Tensor::addmv(const Tensor& mat, const Tensor& vec, double beta, double alpha) const {
  return ::ember::addmv(*this, mat, vec, beta, alpha);
}
Tensor Tensor::baddbmm(const Tensor& batch1, const Tensor& batch2, double beta,
                       double alpha) const {
  return ::ember::baddbmm(*this, batch1, batch2, beta, alpha);
}
Tensor Tensor::addbmm(const Tensor& batch1, const Tensor& batch2, double beta, double alpha) const {
  return ::ember::addbmm(*this, batch1, batch2, beta, alpha);
}
Tensor Tensor::kron(const Tensor& other) const { return ::ember::kron(*this, other); }

}  // namespace ember
