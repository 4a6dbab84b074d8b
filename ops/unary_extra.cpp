// Unary ops whose kernels the elementwise tables already had (sign, floor, ceil, round, log1p,
// expm1), clamp_min / clamp_max, the scalar in-place forms sub_ and div_, and the shape helper
// unbind (unflatten: ops/shape_more_views.cpp).
#include <cmath>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/binary_dispatch.h"
#include "ember/ops/ops.h"

namespace ember {

using ops_internal::unary_dispatch;
using Grads = std::vector<Tensor>;

namespace {

// sign, floor, ceil and round: piecewise constant, so the gradient is zero (as PyTorch). Bool
// inputs are returned as a copy.
Tensor piecewise_constant(const char* op, const Tensor& a, UnaryOp uop) {
  EMBER_CHECK(a.defined(), op, ": argument 'input' is an undefined tensor");
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = a.dtype() == DType::boolean ? a.clone() : unary_dispatch(op, a, uop);
  }
  if (is_floating(a.dtype()) && autograd::needs_grad({&a}))
    autograd::record_backward(op, {a}, {&out},
                              [](const Grads& g, const auto&) { return Grads{zeros_like(g[0])}; });
  return out;
}

Tensor floating_input(const Tensor& a) {
  if (is_floating(a.dtype())) return a;
  autograd::NoGradGuard ng;
  return a.to(DType::f32);
}

}  // namespace

Tensor sign(const Tensor& a) { return piecewise_constant("sign", a, UnaryOp::sign); }
Tensor floor(const Tensor& a) { return piecewise_constant("floor", a, UnaryOp::floor); }
Tensor ceil(const Tensor& a) { return piecewise_constant("ceil", a, UnaryOp::ceil); }
Tensor round(const Tensor& a) { return piecewise_constant("round", a, UnaryOp::round); }

Tensor log1p(const Tensor& a0) {
  EMBER_CHECK(a0.defined(), "log1p: argument 'input' is an undefined tensor");
  const Tensor a = floating_input(a0);
  Tensor out = unary_dispatch("log1p", a, UnaryOp::log1p);
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor sa(a, "log1p");
    autograd::record_backward("log1p", {a}, {&out}, [sa](const Grads& g, const auto&) {
      return Grads{div(g[0], add(sa.unpack(), 1.0))};
    });
  }
  return out;
}

Tensor expm1(const Tensor& a0) {
  EMBER_CHECK(a0.defined(), "expm1: argument 'input' is an undefined tensor");
  const Tensor a = floating_input(a0);
  Tensor out = unary_dispatch("expm1", a, UnaryOp::expm1);
  if (autograd::needs_grad({&a})) {
    autograd::SavedTensor so(out, "expm1");
    autograd::record_backward("expm1", {a}, {&out}, [so](const Grads& g, const auto&) {
      return Grads{mul(g[0], add(so.unpack(), 1.0))};
    });
  }
  return out;
}

Tensor clamp_min(const Tensor& a, double min) { return clamp(a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, double max) { return clamp(a, std::nullopt, max); }

Tensor& sub_(Tensor& a, double b) { return add_(a, -b); }
Tensor& div_(Tensor& a, double b) {
  EMBER_CHECK(a.defined(), "div_: argument 'self' is an undefined tensor");
  EMBER_CHECK(is_floating(a.dtype()), "div_: the quotient of the ", dtype_name(a.dtype()),
              " tensor of shape ", a.shape_str(),
              " is floating and cannot be written back in place; use div (out of place) or "
              "convert the tensor to a floating dtype first");
  return mul_(a, 1.0 / b);
}

std::vector<Tensor> unbind(const Tensor& a, int64_t dim) {
  EMBER_CHECK(a.defined(), "unbind: argument 'input' is an undefined tensor");
  EMBER_CHECK(a.dim() > 0, "unbind: a 0-dim tensor has no dim to unbind");
  const int64_t d = wrap_dim(dim, a.dim(), "unbind");
  std::vector<Tensor> parts;
  parts.reserve(size_t(a.size(d)));
  for (int64_t i = 0; i < a.size(d); ++i) parts.push_back(a.select(d, i));
  return parts;
}

}  // namespace ember
