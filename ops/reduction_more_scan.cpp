// The cumulative scans cumsum, cumprod, cummax and cummin: argument checks, the dense
// [outer, len, inner] view for scan_kernel (kernel_interface/scan.h) and the backward formulas.
#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/scan.h"
#include "ember/ops/ops.h"

namespace ember {

using autograd::SavedTensor;
using Grads = std::vector<Tensor>;

namespace {

struct ScanPlan {
  int64_t dim = 0;  // wrapped; 0 for a 0-dim input
  ReduceShape shape;
};

ScanPlan plan_scan(const char* op, const Tensor& a, int64_t dim) {
  EMBER_CHECK(a.defined(), op, ": the input is an undefined tensor");
  ScanPlan p;
  if (a.dim() == 0) {
    EMBER_CHECK(dim == 0 || dim == -1, op, ": dim ", dim,
                " is out of range for a 0-dim input; use dim 0 or -1");
    return p;
  }
  p.dim = wrap_dim(dim, a.dim(), op);
  for (int64_t d = 0; d < p.dim; ++d) p.shape.outer *= a.size(d);
  p.shape.reduce = a.size(p.dim);
  for (int64_t d = p.dim + 1; d < a.dim(); ++d) p.shape.inner *= a.size(d);
  return p;
}

// Runs the kernel on a dense copy (or the tensor itself when dense) of `a`; no autograd.
Tensor run_scan(const Tensor& a, const ScanPlan& p, ScanOp op, Tensor* indices) {
  autograd::NoGradGuard ng;
  Tensor in = a.is_contiguous() ? a : a.contiguous();
  Tensor out = empty(a.sizes(), TensorOptions(a.dtype()).with_device(a.device()));
  if (indices) *indices = empty(a.sizes(), TensorOptions(DType::i64).with_device(a.device()));
  scan_kernel().get(a.device().type, a.dtype())(out, indices, in, p.shape, op);
  return out;
}

DType scan_dtype(const Tensor& a, std::optional<DType> dtype) {
  if (dtype) return *dtype;
  return is_floating(a.dtype()) ? a.dtype() : DType::i64;
}

// sum_{j >= k} g_j along dim, from the forward scan: sum(g) - cumsum(g) + g.
Tensor reverse_cumsum(const Tensor& g, int64_t dim) {
  if (g.dim() == 0) return g;
  return add(sub(sum(g, {dim}, true), cumsum(g, dim)), g);
}

// d out_j / d x_k = prod_{i <= j, i != k} x_i for j >= k, exact with zeros. Before a row's first
// zero it is out_j / x_k (later outputs are zero, so their terms vanish); at the first zero it is
// the reverse cumulative sum of g times the cumprod with that zero replaced by 1; after it, zero
// (every product still holds the first zero).
Tensor cumprod_backward(const Tensor& x, const Tensor& out, const Tensor& g, int64_t d) {
  if (x.dim() == 0) return g;
  const TensorOptions opt = TensorOptions(x.dtype()).with_device(x.device());
  const Tensor zero = zeros({}, opt), one = ones({}, opt);
  Tensor is_zero = eq(x, zero);
  Tensor zeros_so_far = cumsum(is_zero, d);  // int64
  Tensor before = eq(zeros_so_far, zeros({}, TensorOptions(DType::i64).with_device(x.device())));
  // zeros_so_far * 2 + is_zero is 3 exactly at the first zero.
  Tensor first = eq(add(add(zeros_so_far, zeros_so_far), is_zero.to(DType::i64)),
                    full({}, 3, TensorOptions(DType::i64).with_device(x.device())));
  Tensor safe_x = where(is_zero, one, x);
  Tensor grad_before = div(reverse_cumsum(mul(g, out), d), safe_x);
  Tensor grad_first = reverse_cumsum(mul(g, cumprod(where(first, one, x), d)), d);
  return where(before, grad_before, where(first, grad_first, zero));
}

}  // namespace

Tensor cumsum(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  ScanPlan p = plan_scan("cumsum", a0, dim);
  DType dt = scan_dtype(a0, dtype);
  Tensor a = a0.dtype() == dt ? a0 : cast(a0, dt);  // differentiable between floating dtypes
  Tensor out = run_scan(a, p, ScanOp::sum, nullptr);
  if (autograd::needs_grad({&a})) {
    autograd::record_backward("cumsum", {a}, {&out}, [d = p.dim](const Grads& g, const auto&) {
      return Grads{reverse_cumsum(g[0], d)};
    });
  }
  return out;
}

Tensor cumprod(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  ScanPlan p = plan_scan("cumprod", a0, dim);
  DType dt = scan_dtype(a0, dtype);
  Tensor a = a0.dtype() == dt ? a0 : cast(a0, dt);
  Tensor out = run_scan(a, p, ScanOp::prod, nullptr);
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, "cumprod"), so(out, "cumprod");
    autograd::record_backward("cumprod", {a}, {&out},
                              [sa, so, d = p.dim](const Grads& g, const auto&) {
                                return Grads{cumprod_backward(sa.unpack(), so.unpack(), g[0], d)};
                              });
  }
  return out;
}

namespace {
std::tuple<Tensor, Tensor> cum_extreme(const char* op, const Tensor& a, int64_t dim, ScanOp sop) {
  ScanPlan p = plan_scan(op, a, dim);
  Tensor indices;
  Tensor values = run_scan(a, p, sop, &indices);
  if (autograd::needs_grad({&a})) {
    autograd::record_backward(op, {a}, {&values},
                              [idx = indices, d = p.dim, in = a.sizes(), dt = a.dtype(),
                               dev = a.device()](const Grads& g, const auto&) {
                                if (in.empty()) return Grads{g[0]};
                                Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
                                return Grads{scatter_add(r, d, idx, g[0])};
                              });
  }
  return {values, indices};
}
}  // namespace

std::tuple<Tensor, Tensor> cummax(const Tensor& a, int64_t dim) {
  return cum_extreme("cummax", a, dim, ScanOp::max);
}
std::tuple<Tensor, Tensor> cummin(const Tensor& a, int64_t dim) {
  return cum_extreme("cummin", a, dim, ScanOp::min);
}

// ---- Tensor methods ----
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return ::ember::cumsum(*this, dim, dtype);
}
Tensor Tensor::cumprod(int64_t dim, std::optional<DType> dtype) const {
  return ::ember::cumprod(*this, dim, dtype);
}
std::tuple<Tensor, Tensor> Tensor::cummax(int64_t dim) const { return ::ember::cummax(*this, dim); }
std::tuple<Tensor, Tensor> Tensor::cummin(int64_t dim) const { return ::ember::cummin(*this, dim); }

}  // namespace ember
