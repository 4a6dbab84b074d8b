// any / all / count_nonzero, aminmax, var_mean / std_mean and norm / linalg_vector_norm. They are
// built from the reduction and elementwise ops (so both backends run them through the existing
// reduce and elementwise kernels); the p-norm has its own backward so that a zero norm gives a
// zero gradient instead of 0/0.
#include <algorithm>
#include <cmath>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using autograd::SavedTensor;
using Grads = std::vector<Tensor>;

namespace {

Tensor zero_like_scalar(const Tensor& a) {
  return zeros({}, TensorOptions(a.dtype()).with_device(a.device()));
}

void check_defined(const char* op, const Tensor& a) {
  EMBER_CHECK(a.defined(), op, ": the input is an undefined tensor");
}

Shape wrapped_dims(const char* op, const Tensor& a, const Shape& dims) {
  Shape out;
  for (int64_t d : dims) out.push_back(a.dim() == 0 ? 0 : wrap_dim(d, a.dim(), op));
  return out;
}

}  // namespace

Tensor any(const Tensor& a, const Shape& dims, bool keepdim) {
  check_defined("any", a);
  autograd::NoGradGuard ng;
  return gt(sum(ne(a, zero_like_scalar(a)), dims, keepdim),
            zeros({}, TensorOptions(DType::i64).with_device(a.device())));
}
Tensor any(const Tensor& a) { return any(a, Shape{}, false); }
Tensor any(const Tensor& a, int64_t dim, bool keepdim) { return any(a, Shape{dim}, keepdim); }

Tensor all(const Tensor& a, const Shape& dims, bool keepdim) {
  check_defined("all", a);
  autograd::NoGradGuard ng;
  return eq(sum(eq(a, zero_like_scalar(a)), dims, keepdim),
            zeros({}, TensorOptions(DType::i64).with_device(a.device())));
}
Tensor all(const Tensor& a) { return all(a, Shape{}, false); }
Tensor all(const Tensor& a, int64_t dim, bool keepdim) { return all(a, Shape{dim}, keepdim); }

Tensor count_nonzero(const Tensor& a, const Shape& dims) {
  check_defined("count_nonzero", a);
  autograd::NoGradGuard ng;
  return sum(ne(a, zero_like_scalar(a)), dims, false);
}

std::tuple<Tensor, Tensor> aminmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  check_defined("aminmax", a);
  EMBER_CHECK(a.numel() > 0, "aminmax: the input of shape ", a.shape_str(),
              " is empty; aminmax needs at least one element");
  Shape dims = dim ? Shape{*dim} : Shape{};
  if (dim && a.dim() > 0)
    EMBER_CHECK(a.size(wrap_dim(*dim, a.dim(), "aminmax")) > 0, "aminmax: dim ", *dim,
                " of the input of shape ", a.shape_str(), " is empty");
  return {amin(a, dims, keepdim), amax(a, dims, keepdim)};
}

std::tuple<Tensor, Tensor> var_mean(const Tensor& a, const Shape& dims, int64_t correction,
                                    bool keepdim) {
  check_defined("var_mean", a);
  return {var(a, dims, correction, keepdim), mean(a, dims, keepdim)};
}

std::tuple<Tensor, Tensor> std_mean(const Tensor& a, const Shape& dims, int64_t correction,
                                    bool keepdim) {
  check_defined("std_mean", a);
  return {ember::std(a, dims, correction, keepdim), mean(a, dims, keepdim)};
}

Tensor linalg_vector_norm(const Tensor& a, double ord, const Shape& dims, bool keepdim) {
  const char* op = "linalg_vector_norm";
  check_defined(op, a);
  EMBER_CHECK(is_floating(a.dtype()), op, ": needs a floating-point input, got ",
              dtype_name(a.dtype()), " of shape ", a.shape_str(), "; convert with .to(DType::f32)");
  EMBER_CHECK(!std::isnan(ord), op, ": ord is NaN; pass a number, inf or -inf");
  Shape d = wrapped_dims(op, a, dims);
  if (std::isinf(ord)) {
    if (a.numel() == 0 ||
        std::any_of(d.begin(), d.end(), [&](int64_t i) { return a.size(i) == 0; }))
      EMBER_CHECK(false, op, ": ord=", ord, " over an empty dim of the input of shape ",
                  a.shape_str(), " is undefined; use a finite ord");
    return ord > 0 ? amax(abs(a), d, keepdim) : amin(abs(a), d, keepdim);
  }
  if (ord == 0) {
    autograd::NoGradGuard ng;
    return sum(ne(a, zero_like_scalar(a)).to(a.dtype()), d, keepdim);
  }
  Tensor out;
  {
    autograd::NoGradGuard ng;
    if (ord == 1)
      out = sum(abs(a), d, keepdim);
    else if (ord == 2)
      out = sqrt(sum(square(a), d, keepdim));
    else
      out = pow(sum(pow(abs(a), ord), d, keepdim), 1.0 / ord);
  }
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, op), so(out, op);
    Shape keep_shape = a.sizes();
    for (int64_t i : d) keep_shape[size_t(i)] = 1;
    if (d.empty()) keep_shape.assign(size_t(a.dim()), 1);
    autograd::record_backward(
        op, {a}, {&out}, [sa, so, ord, keep_shape](const Grads& g, const auto&) {
          // d/dx (sum |x|^p)^(1/p) = x |x|^(p-2) / norm^(p-1); zero where x or the norm is zero.
          const Tensor& x = sa.unpack();
          Tensor n = so.unpack().reshape(keep_shape);
          Tensor zero = zeros({}, TensorOptions(x.dtype()).with_device(x.device()));
          Tensor ax = abs(x);
          Tensor num = ord == 2 ? x : mul(x, pow(ax, ord - 2));
          Tensor den = ord == 2 ? n : pow(n, ord - 1);
          Tensor r = div(mul(num, g[0].reshape(keep_shape)), den);
          r = where(eq(n, zero), zero, r);
          return Grads{ord == 2 ? r : where(eq(x, zero), zero, r)};
        });
  }
  return out;
}

Tensor norm(const Tensor& a, double p, const Shape& dims, bool keepdim) {
  return linalg_vector_norm(a, p, dims, keepdim);
}

// ---- Tensor methods ----
Tensor Tensor::any() const { return ::ember::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return ::ember::any(*this, dim, keepdim); }
Tensor Tensor::all() const { return ::ember::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return ::ember::all(*this, dim, keepdim); }
Tensor Tensor::count_nonzero(const Shape& dims) const {
  return ::ember::count_nonzero(*this, dims);
}
std::tuple<Tensor, Tensor> Tensor::aminmax(std::optional<int64_t> dim, bool keepdim) const {
  return ::ember::aminmax(*this, dim, keepdim);
}
Tensor Tensor::norm(double p, const Shape& dims, bool keepdim) const {
  return ::ember::norm(*this, p, dims, keepdim);
}

}  // namespace ember
