// Issue 34's elementwise ops (declared in ops/elementwise_more.h): unary transcendental and
// rounding ops on the unary kernel (UnaryOp), atan2 and hypot on the binary kernel, and the
// composite ones (lerp, addcmul, addcdiv, clamp with tensor bounds, isclose) built from core ops.
// Each differentiable op records its backward from differentiable ops, so double backward works.
#include <cmath>
#include <limits>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/binary_dispatch.h"
#include "ember/ops/ops.h"

namespace ember {

using autograd::SavedTensor;
using ops_internal::binary_dispatch;
using ops_internal::unary_dispatch;
using Grads = std::vector<Tensor>;

namespace {

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
constexpr double kSqrtPiOverTwo = 0.88622692545275801365;

void check_defined(const char* op, const Tensor& t, const char* arg) {
  EMBER_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

Tensor floating(const Tensor& a) {
  if (is_floating(a.dtype())) return a;
  autograd::NoGradGuard ng;
  return a.to(DType::f32);
}

// The gradient of an input of shape `sizes` and dtype `dtype` from a broadcast gradient.
Tensor reduce_grad(const Tensor& g, const Shape& sizes, DType dtype) {
  Tensor r = autograd::sum_to(g, sizes);
  return r.dtype() == dtype ? r : r.to(dtype);
}

// A differentiable unary op on the floating unary kernel: integral inputs compute in float32;
// the gradient is deriv(g, x, out) with x the (floating) input and out the result.
template <typename Deriv>
Tensor unary_floating(const char* op, const Tensor& a0, UnaryOp uop, Deriv deriv,
                      UnaryParams p = {}) {
  check_defined(op, a0, "input");
  const Tensor a = floating(a0);
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = unary_dispatch(op, a, uop, p);
  }
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, op), so(out, op);
    autograd::record_backward(op, {a}, {&out}, [sa, so, deriv](const Grads& g, const auto&) {
      return Grads{deriv(g[0], sa.unpack(), so.unpack())};
    });
  }
  return out;
}

// A piecewise-constant op (zero gradient, as PyTorch) on the unary kernel, in a's dtype.
Tensor piecewise_constant(const char* op, const Tensor& a, UnaryOp uop, UnaryParams p = {}) {
  check_defined(op, a, "input");
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = unary_dispatch(op, a, uop, p);
  }
  if (is_floating(a.dtype()) && autograd::needs_grad({&a}))
    autograd::record_backward(op, {a}, {&out},
                              [](const Grads& g, const auto&) { return Grads{zeros_like(g[0])}; });
  return out;
}

Tensor copy_of(const Tensor& a) {
  autograd::NoGradGuard ng;
  return a.clone();
}

}  // namespace

// ---- unary ----
Tensor log2(const Tensor& a) {
  return unary_floating(
      "log2", a, UnaryOp::log2,
      [](const Tensor& g, const Tensor& x, const auto&) { return div(g, mul(x, M_LN2)); });
}
Tensor log10(const Tensor& a) {
  return unary_floating(
      "log10", a, UnaryOp::log10,
      [](const Tensor& g, const Tensor& x, const auto&) { return div(g, mul(x, M_LN10)); });
}
Tensor tan(const Tensor& a) {
  return unary_floating("tan", a, UnaryOp::tan, [](const Tensor& g, const auto&, const Tensor& o) {
    return mul(g, add(square(o), 1.0));
  });
}
Tensor asin(const Tensor& a) {
  return unary_floating("asin", a, UnaryOp::asin,
                        [](const Tensor& g, const Tensor& x, const auto&) {
                          return mul(g, rsqrt(rsub(square(x), 1.0)));
                        });
}
Tensor acos(const Tensor& a) {
  return unary_floating("acos", a, UnaryOp::acos,
                        [](const Tensor& g, const Tensor& x, const auto&) {
                          return neg(mul(g, rsqrt(rsub(square(x), 1.0))));
                        });
}
Tensor atan(const Tensor& a) {
  return unary_floating(
      "atan", a, UnaryOp::atan,
      [](const Tensor& g, const Tensor& x, const auto&) { return div(g, add(square(x), 1.0)); });
}
Tensor sinh(const Tensor& a) {
  return unary_floating(
      "sinh", a, UnaryOp::sinh,
      [](const Tensor& g, const Tensor& x, const auto&) { return mul(g, cosh(x)); });
}
Tensor cosh(const Tensor& a) {
  return unary_floating(
      "cosh", a, UnaryOp::cosh,
      [](const Tensor& g, const Tensor& x, const auto&) { return mul(g, sinh(x)); });
}
Tensor asinh(const Tensor& a) {
  return unary_floating("asinh", a, UnaryOp::asinh,
                        [](const Tensor& g, const Tensor& x, const auto&) {
                          return mul(g, rsqrt(add(square(x), 1.0)));
                        });
}
Tensor acosh(const Tensor& a) {
  return unary_floating("acosh", a, UnaryOp::acosh,
                        [](const Tensor& g, const Tensor& x, const auto&) {
                          return mul(g, rsqrt(mul(sub(x, 1.0), add(x, 1.0))));
                        });
}
Tensor atanh(const Tensor& a) {
  return unary_floating(
      "atanh", a, UnaryOp::atanh,
      [](const Tensor& g, const Tensor& x, const auto&) { return div(g, rsub(square(x), 1.0)); });
}
Tensor erf(const Tensor& a) {
  return unary_floating("erf", a, UnaryOp::erf, [](const Tensor& g, const Tensor& x, const auto&) {
    return mul(g, mul(exp(neg(square(x))), kTwoOverSqrtPi));
  });
}
Tensor erfc(const Tensor& a) {
  return unary_floating("erfc", a, UnaryOp::erfc,
                        [](const Tensor& g, const Tensor& x, const auto&) {
                          return mul(g, mul(exp(neg(square(x))), -kTwoOverSqrtPi));
                        });
}
Tensor erfinv(const Tensor& a) {
  return unary_floating("erfinv", a, UnaryOp::erfinv,
                        [](const Tensor& g, const auto&, const Tensor& o) {
                          return mul(g, mul(exp(square(o)), kSqrtPiOverTwo));
                        });
}
Tensor trunc(const Tensor& a) {
  check_defined("trunc", a, "input");
  if (a.dtype() == DType::boolean) return copy_of(a);
  return piecewise_constant("trunc", a, UnaryOp::trunc);
}
Tensor fix(const Tensor& a) { return trunc(a); }
Tensor frac(const Tensor& a) {
  check_defined("frac", a, "input");
  EMBER_CHECK(is_floating(a.dtype()), "frac: the input of shape ", a.shape_str(), " has dtype ",
              dtype_name(a.dtype()),
              " but frac needs a floating tensor (an integer has no fractional part); convert it "
              "with .to(kFloat) first");
  return unary_floating("frac", a, UnaryOp::frac,
                        [](const Tensor& g, const auto&, const auto&) { return g; });
}
Tensor sgn(const Tensor& a) { return sign(a); }

Tensor round(const Tensor& a, int64_t decimals) {
  check_defined("round", a, "input");
  if (decimals == 0) return round(a);
  EMBER_CHECK(is_floating(a.dtype()), "round: decimals=", decimals,
              " needs a floating tensor, but the input of shape ", a.shape_str(), " has dtype ",
              dtype_name(a.dtype()), "; convert it with .to(kFloat) first");
  const double scale = std::pow(10.0, double(decimals < 0 ? -decimals : decimals));
  return piecewise_constant("round", a, UnaryOp::round_decimals,
                            UnaryParams{scale, decimals < 0 ? 1.0 : 0.0, 0});
}

Tensor nan_to_num(const Tensor& a, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  check_defined("nan_to_num", a, "input");
  if (!is_floating(a.dtype())) return copy_of(a);
  double largest = std::numeric_limits<double>::max();
  switch (a.dtype()) {
    case DType::f32:
      largest = double(std::numeric_limits<float>::max());
      break;
    case DType::f16:
      largest = 65504.0;
      break;
    case DType::bf16:
      largest = 3.38953138925153547590e38;
      break;
    default:
      break;
  }
  const UnaryParams p{nan.value_or(0.0), posinf.value_or(largest), neginf.value_or(-largest)};
  return unary_floating(
      "nan_to_num", a, UnaryOp::nan_to_num,
      [](const Tensor& g, const Tensor& x, const auto&) {
        return mul(g, isfinite(x).to(g.dtype()));
      },
      p);
}

Tensor isinf(const Tensor& a) {
  check_defined("isinf", a, "input");
  Tensor out = empty(a.sizes(), DType::boolean, a.device());
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter("isinf", out, {a});
    unary_kernel().get(a.device().type, a.dtype())(it, UnaryOp::isinf, {});
  }
  return out;
}

// ---- binary ----
namespace {
// A floating binary op on the binary kernel, broadcasting, with type promotion (integral -> f32).
// deriv(g, a, b, out) returns the two unreduced gradients.
template <typename Deriv>
Tensor binary_floating(const char* op, const Tensor& a, const Tensor& b, BinaryOp bop,
                       Deriv deriv) {
  check_defined(op, a, "input");
  check_defined(op, b, "other");
  DType common = promote_types(a.dtype(), b.dtype());
  if (!is_floating(common)) common = DType::f32;
  Tensor out = binary_dispatch(op, a, b, bop, common);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sa(a, op), sb(b, op), so(out, op);
    autograd::record_backward(op, {a, b}, {&out},
                              [sa, sb, so, deriv, sza = a.sizes(), szb = b.sizes(), ta = a.dtype(),
                               tb = b.dtype()](const Grads& g, const auto& node) {
                                auto [ga, gb] = deriv(g[0], sa.unpack(), sb.unpack(), so.unpack());
                                Grads r(2);
                                if (node.needs_input_grad(0)) r[0] = reduce_grad(ga, sza, ta);
                                if (node.needs_input_grad(1)) r[1] = reduce_grad(gb, szb, tb);
                                return r;
                              });
  }
  return out;
}
}  // namespace

Tensor atan2(const Tensor& a, const Tensor& b) {
  return binary_floating("atan2", a, b, BinaryOp::atan2,
                         [](const Tensor& g, const Tensor& y, const Tensor& x, const Tensor&) {
                           const Tensor r = div(g, add(square(x), square(y)));
                           return std::pair{mul(r, x), neg(mul(r, y))};
                         });
}
Tensor arctan2(const Tensor& a, const Tensor& b) { return atan2(a, b); }

Tensor hypot(const Tensor& a, const Tensor& b) {
  return binary_floating("hypot", a, b, BinaryOp::hypot,
                         [](const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& o) {
                           const Tensor r = div(g, o);
                           return std::pair{mul(r, x), mul(r, y)};
                         });
}

// ---- composites ----
namespace {
void check_floating(const char* op, const Tensor& t, const char* arg) {
  check_defined(op, t, arg);
  EMBER_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' (shape ", t.shape_str(),
              ") has dtype ", dtype_name(t.dtype()), " but ", op,
              " needs floating tensors; convert it with .to(kFloat) first");
}
}  // namespace

Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  check_floating("lerp", start, "input");
  check_floating("lerp", end, "end");
  broadcast_shapes("lerp", {start.sizes(), end.sizes()});
  // The two forms PyTorch uses keep lerp(a, b, 0) == a and lerp(a, b, 1) == b exactly.
  const Tensor diff = sub(end, start);
  if (std::abs(weight) < 0.5) return add(start, mul(diff, weight));
  return sub(end, mul(diff, 1.0 - weight));
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  check_floating("lerp", start, "input");
  check_floating("lerp", end, "end");
  check_floating("lerp", weight, "weight");
  broadcast_shapes("lerp", {start.sizes(), end.sizes(), weight.sizes()});
  const Tensor diff = sub(end, start);
  Tensor small;
  {
    autograd::NoGradGuard ng;
    small =
        lt(abs(weight), full({}, 0.5, TensorOptions(weight.dtype()).with_device(weight.device())));
  }
  return where(small, add(start, mul(weight, diff)), sub(end, mul(diff, rsub(weight, 1.0))));
}

Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, double value) {
  check_defined("addcmul", self, "input");
  check_defined("addcmul", tensor1, "tensor1");
  check_defined("addcmul", tensor2, "tensor2");
  broadcast_shapes("addcmul", {self.sizes(), tensor1.sizes(), tensor2.sizes()});
  const Tensor prod = mul(tensor1, tensor2);
  return add(self, value == 1 ? prod : mul(prod, value));
}

Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, double value) {
  check_defined("addcdiv", self, "input");
  check_defined("addcdiv", tensor1, "tensor1");
  check_defined("addcdiv", tensor2, "tensor2");
  EMBER_CHECK(is_floating(tensor1.dtype()) || is_floating(tensor2.dtype()),
              "addcdiv: integer division of tensor1 (", dtype_name(tensor1.dtype()), ", shape ",
              tensor1.shape_str(), ") by tensor2 (", dtype_name(tensor2.dtype()), ", shape ",
              tensor2.shape_str(),
              ") is not supported (as in PyTorch); convert them to a floating dtype first");
  broadcast_shapes("addcdiv", {self.sizes(), tensor1.sizes(), tensor2.sizes()});
  const Tensor q = div(tensor1, tensor2);
  return add(self, value == 1 ? q : mul(q, value));
}

Tensor clamp(const Tensor& a, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  check_defined("clamp", a, "input");
  const bool has_min = min.has_value() && min->defined();
  const bool has_max = max.has_value() && max->defined();
  EMBER_CHECK(has_min || has_max, "clamp: at least one of 'min' or 'max' must be given (input ",
              a.shape_str(), ")");
  std::vector<Shape> shapes{a.sizes()};
  if (has_min) shapes.push_back(min->sizes());
  if (has_max) shapes.push_back(max->sizes());
  broadcast_shapes("clamp", shapes);
  const Tensor lo = has_min ? *min : Tensor(), hi = has_max ? *max : Tensor();
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = a;
    if (has_min) out = maximum(out, lo);
    if (has_max) out = minimum(out, hi);
  }
  if (!is_floating(out.dtype()) || !autograd::needs_grad({&a, &lo, &hi})) return out;
  SavedTensor sa(a, "clamp"), sl(lo, "clamp"), sh(hi, "clamp");
  autograd::record_backward(
      "clamp", {a, lo, hi}, {&out},
      [sa, sl, sh, has_min, has_max, za = a.sizes(), ta = a.dtype(),
       zl = has_min ? lo.sizes() : Shape{}, tl = has_min ? lo.dtype() : a.dtype(),
       zh = has_max ? hi.sizes() : Shape{},
       th = has_max ? hi.dtype() : a.dtype()](const Grads& grads, const auto& node) {
        const Tensor& g = grads[0];
        const Tensor x = sa.unpack().detach();
        const Tensor zero = zeros({}, TensorOptions(g.dtype()).with_device(g.device()));
        Tensor inside = ones(x.sizes(), TensorOptions(DType::boolean).with_device(x.device()));
        Tensor lo_v, hi_v;
        if (has_min) lo_v = sl.unpack().detach();
        if (has_max) hi_v = sh.unpack().detach();
        if (has_min) inside = logical_and(inside, ge(x, lo_v));
        if (has_max) inside = logical_and(inside, le(x, hi_v));
        Grads r(3);
        if (node.needs_input_grad(0)) r[0] = reduce_grad(where(inside, g, zero), za, ta);
        if (has_min && node.needs_input_grad(1)) {
          Tensor takes_min = lt(x, lo_v);
          if (has_max) takes_min = logical_and(takes_min, lt(lo_v, hi_v));
          r[1] = reduce_grad(where(takes_min, g, zero), zl, tl);
        }
        if (has_max && node.needs_input_grad(2)) {
          Tensor takes_max = gt(x, hi_v);
          if (has_min) takes_max = logical_or(takes_max, lt(hi_v, lo_v));
          r[2] = reduce_grad(where(takes_max, g, zero), zh, th);
        }
        return r;
      });
  return out;
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("isclose", a, "input");
  check_defined("isclose", b, "other");
  EMBER_CHECK(a.dtype() == b.dtype(), "isclose: input (", dtype_name(a.dtype()), ", shape ",
              a.shape_str(), ") and other (", dtype_name(b.dtype()), ", shape ", b.shape_str(),
              ") must have the same dtype; convert one with .to(dtype)");
  EMBER_CHECK(rtol >= 0 && atol >= 0, "isclose: rtol (", rtol, ") and atol (", atol,
              ") must be non-negative");
  autograd::NoGradGuard ng;
  Tensor close = eq(a, b);
  if (equal_nan && is_floating(a.dtype()))
    close = logical_or(close, logical_and(isnan(a), isnan(b)));
  if (a.dtype() == DType::boolean || (rtol == 0 && atol == 0)) return close;
  const Tensor af = is_floating(a.dtype()) ? a : a.to(DType::f64);
  const Tensor bf = is_floating(b.dtype()) ? b : b.to(DType::f64);
  const Tensor allowed = add(abs(mul(bf, rtol)), atol);
  const Tensor actual = abs(sub(af, bf));
  return logical_or(close, logical_and(isfinite(actual), le(actual, allowed)));
}

// ---- Tensor methods ----
Tensor Tensor::log2() const { return ::ember::log2(*this); }
Tensor Tensor::log10() const { return ::ember::log10(*this); }
Tensor Tensor::tan() const { return ::ember::tan(*this); }
Tensor Tensor::asin() const { return ::ember::asin(*this); }
Tensor Tensor::acos() const { return ::ember::acos(*this); }
Tensor Tensor::atan() const { return ::ember::atan(*this); }
Tensor Tensor::sinh() const { return ::ember::sinh(*this); }
Tensor Tensor::cosh() const { return ::ember::cosh(*this); }
Tensor Tensor::asinh() const { return ::ember::asinh(*this); }
Tensor Tensor::acosh() const { return ::ember::acosh(*this); }
Tensor Tensor::atanh() const { return ::ember::atanh(*this); }
Tensor Tensor::erf() const { return ::ember::erf(*this); }
Tensor Tensor::erfc() const { return ::ember::erfc(*this); }
Tensor Tensor::erfinv() const { return ::ember::erfinv(*this); }
Tensor Tensor::trunc() const { return ::ember::trunc(*this); }
Tensor Tensor::fix() const { return ::ember::fix(*this); }
Tensor Tensor::frac() const { return ::ember::frac(*this); }
Tensor Tensor::sgn() const { return ::ember::sgn(*this); }
Tensor Tensor::isinf() const { return ::ember::isinf(*this); }
Tensor Tensor::round(int64_t decimals) const { return ::ember::round(*this, decimals); }
Tensor Tensor::nan_to_num(std::optional<double> nan, std::optional<double> posinf,
                          std::optional<double> neginf) const {
  return ::ember::nan_to_num(*this, nan, posinf, neginf);
}
Tensor Tensor::atan2(const Tensor& other) const { return ::ember::atan2(*this, other); }
Tensor Tensor::arctan2(const Tensor& other) const { return ::ember::arctan2(*this, other); }
Tensor Tensor::hypot(const Tensor& other) const { return ::ember::hypot(*this, other); }
Tensor Tensor::lerp(const Tensor& end, double weight) const {
  return ::ember::lerp(*this, end, weight);
}
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight) const {
  return ::ember::lerp(*this, end, weight);
}
Tensor Tensor::addcmul(const Tensor& tensor1, const Tensor& tensor2, double value) const {
  return ::ember::addcmul(*this, tensor1, tensor2, value);
}
Tensor Tensor::addcdiv(const Tensor& tensor1, const Tensor& tensor2, double value) const {
  return ::ember::addcdiv(*this, tensor1, tensor2, value);
}
Tensor Tensor::clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const {
  return ::ember::clamp(*this, min, max);
}
Tensor Tensor::isclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return ::ember::isclose(*this, other, rtol, atol, equal_nan);
}

}  // namespace ember
