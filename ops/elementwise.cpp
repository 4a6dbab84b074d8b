// Elementwise ops: unary, binary (broadcasting, type promotion), scalar variants, where, clamp,
// comparisons and the in-place forms, each with its backward formula beside the forward.
#include "ember/kernel_interface/elementwise.h"

#include <cmath>
#include <limits>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using autograd::SavedTensor;
using autograd::sum_to;
using Grads = std::vector<Tensor>;

namespace {

void check_defined(const char* op, const Tensor& t, const char* arg) {
  EMBER_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

// The output layout of an elementwise op: channels_last when the input with the full shape is.
MemoryFormat out_format(const Tensor& a, const Shape& shape) {
  if (a.sizes() == shape && (a.dim() == 4 || a.dim() == 5)) return a.suggest_memory_format();
  return MemoryFormat::contiguous;
}

// What a backward needs to know of an input it does not save: its shape and dtype.
struct InputInfo {
  Shape sizes;
  DType dtype;
  explicit InputInfo(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()) {}
};

// Gradient for an input: reduce broadcast dims and return to the input's dtype.
Tensor grad_for(const Tensor& g, const InputInfo& input) {
  Tensor r = sum_to(g, input.sizes);
  return r.dtype() == input.dtype ? r : r.to(input.dtype);
}

Tensor unary_raw(const char* op, const Tensor& a, UnaryOp uop, UnaryParams p, bool writes_bool) {
  check_defined(op, a, "input");
  Tensor out = empty(a.sizes(), writes_bool ? DType::boolean : a.dtype(), a.device(),
                     out_format(a, a.sizes()));
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter(op, out, {a});
    unary_kernel().get(a.device().type, a.dtype())(it, uop, p);
  }
  return out;
}

// Floating ops on integral inputs compute in float32, as PyTorch does.
Tensor to_floating(const Tensor& a) {
  if (is_floating(a.dtype())) return a;
  autograd::NoGradGuard ng;
  return a.to(DType::f32);
}

Tensor binary_raw(const char* op, const Tensor& a0, const Tensor& b0, BinaryOp bop, double alpha) {
  check_defined(op, a0, "input");
  check_defined(op, b0, "other");
  EMBER_CHECK(a0.device() == b0.device(), op,
              ": expected both tensors on the same device, but got ", a0.device().str(), " and ",
              b0.device().str(), "; move one with .to(device)");
  DType common = promote_types(a0.dtype(), b0.dtype());
  if ((bop == BinaryOp::div || bop == BinaryOp::pow || bop == BinaryOp::atan2) &&
      !is_floating(common))
    common = DType::f32;
  Tensor a = a0, b = b0;
  {
    autograd::NoGradGuard ng;
    if (a.dtype() != common) a = a.to(common);
    if (b.dtype() != common) b = b.to(common);
  }
  Shape shape = broadcast_shapes(op, {a.sizes(), b.sizes()});
  Tensor out = empty(shape, binary_op_writes_bool(bop) ? DType::boolean : common, a.device(),
                     out_format(a.sizes() == shape ? a : b, shape));
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter(op, out, {a, b});
    binary_kernel().get(a.device().type, common)(it, bop, alpha);
  }
  return out;
}

}  // namespace

// ---- binary ----
Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_raw("add", a, b, BinaryOp::add, alpha);
  if (autograd::needs_grad({&a, &b})) {
    autograd::record_backward(
        "add", {a, b}, {&out},
        [ta = InputInfo(a), tb = InputInfo(b), alpha](const Grads& g, const auto& node) {
          Grads r(2);
          if (node.needs_input_grad(0)) r[0] = grad_for(g[0], ta);
          if (node.needs_input_grad(1)) r[1] = grad_for(alpha == 1 ? g[0] : mul(g[0], alpha), tb);
          return r;
        });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_raw("sub", a, b, BinaryOp::sub, alpha);
  if (autograd::needs_grad({&a, &b})) {
    autograd::record_backward(
        "sub", {a, b}, {&out},
        [ta = InputInfo(a), tb = InputInfo(b), alpha](const Grads& g, const auto& node) {
          Grads r(2);
          if (node.needs_input_grad(0)) r[0] = grad_for(g[0], ta);
          if (node.needs_input_grad(1)) r[1] = grad_for(mul(g[0], -alpha), tb);
          return r;
        });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw("mul", a, b, BinaryOp::mul, 1);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor(), "mul"),
        sb(a.requires_grad() ? b : Tensor(), "mul");
    autograd::record_backward(
        "mul", {a, b}, {&out},
        [sa, sb, ta = InputInfo(a), tb = InputInfo(b)](const Grads& g, const auto& node) {
          Grads r(2);
          if (node.needs_input_grad(0)) r[0] = grad_for(mul(g[0], sb.unpack()), ta);
          if (node.needs_input_grad(1)) r[1] = grad_for(mul(g[0], sa.unpack()), tb);
          return r;
        });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw("div", a, b, BinaryOp::div, 1);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sb(b, "div"), so(b.requires_grad() ? out : Tensor(), "div");
    autograd::record_backward(
        "div", {a, b}, {&out},
        [sb, so, ta = InputInfo(a), tb = InputInfo(b)](const Grads& g, const auto& node) {
          Grads r(2);
          const Tensor& bv = sb.unpack();
          if (node.needs_input_grad(0)) r[0] = grad_for(div(g[0], bv), ta);
          if (node.needs_input_grad(1)) r[1] = grad_for(neg(div(mul(g[0], so.unpack()), bv)), tb);
          return r;
        });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw("pow", a, b, BinaryOp::pow, 1);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sa(a, "pow"), sb(b, "pow"), so(out, "pow");
    autograd::record_backward(
        "pow", {a, b}, {&out},
        [sa, sb, so, ta = InputInfo(a), tb = InputInfo(b)](const Grads& g, const auto& node) {
          Grads r(2);
          const Tensor &av = sa.unpack(), &bv = sb.unpack();
          if (node.needs_input_grad(0))
            r[0] = grad_for(mul(g[0], mul(bv, pow(av, sub(bv, 1.0)))), ta);
          if (node.needs_input_grad(1)) {
            // d/db a^b = a^b log a, taken as 0 where a == 0 (as PyTorch does).
            Tensor la = where(eq(av, zeros_like(av)), zeros_like(av), log(av));
            r[1] = grad_for(mul(g[0], mul(so.unpack(), la)), tb);
          }
          return r;
        });
  }
  return out;
}

namespace {
Tensor min_max(const char* op, const Tensor& a, const Tensor& b, BinaryOp bop) {
  Tensor out = binary_raw(op, a, b, bop, 1);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sa(a, op), sb(b, op);
    const bool is_max = bop == BinaryOp::maximum;
    autograd::record_backward(
        op, {a, b}, {&out},
        [sa, sb, is_max, ta = InputInfo(a), tb = InputInfo(b)](const Grads& g, const auto& node) {
          const Tensor &av = sa.unpack(), &bv = sb.unpack();
          // Ties split the gradient evenly, as PyTorch does.
          Tensor wins = (is_max ? gt(av, bv) : lt(av, bv)).to(g[0].dtype());
          Tensor ties = eq(av, bv).to(g[0].dtype());
          Tensor wa = add(wins, mul(ties, 0.5));
          Grads r(2);
          if (node.needs_input_grad(0)) r[0] = grad_for(mul(g[0], wa), ta);
          if (node.needs_input_grad(1)) r[1] = grad_for(mul(g[0], rsub(wa, 1.0)), tb);
          return r;
        });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return min_max("maximum", a, b, BinaryOp::maximum);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return min_max("minimum", a, b, BinaryOp::minimum);
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_raw("eq", a, b, BinaryOp::eq, 1); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_raw("ne", a, b, BinaryOp::ne, 1); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_raw("lt", a, b, BinaryOp::lt, 1); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_raw("le", a, b, BinaryOp::le, 1); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_raw("gt", a, b, BinaryOp::gt, 1); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_raw("ge", a, b, BinaryOp::ge, 1); }

// ---- unary ----
namespace {
// A differentiable unary op whose gradient is g * dfdx(saved input, saved output).
template <typename Deriv>
Tensor unary_op(const char* op, const Tensor& a0, UnaryOp uop, UnaryParams p, bool save_in,
                bool save_out, Deriv deriv) {
  Tensor a = to_floating(a0);
  Tensor out = unary_raw(op, a, uop, p, false);
  if (autograd::needs_grad({&a})) {
    SavedTensor si(save_in ? a : Tensor(), op), so(save_out ? out : Tensor(), op);
    autograd::record_backward(op, {a}, {&out}, [si, so, deriv](const Grads& g, const auto&) {
      return Grads{deriv(g[0], si.unpack(), so.unpack())};
    });
  }
  return out;
}
}  // namespace

Tensor neg(const Tensor& a) {
  Tensor out = unary_raw("neg", a, UnaryOp::neg, {}, false);
  if (autograd::needs_grad({&a}))
    autograd::record_backward("neg", {a}, {&out},
                              [](const Grads& g, const auto&) { return Grads{neg(g[0])}; });
  return out;
}
Tensor exp(const Tensor& a) {
  return unary_op("exp", a, UnaryOp::exp, {}, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& o) { return mul(g, o); });
}
Tensor log(const Tensor& a) {
  return unary_op("log", a, UnaryOp::log, {}, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x); });
}
Tensor sqrt(const Tensor& a) {
  return unary_op(
      "sqrt", a, UnaryOp::sqrt, {}, false, true,
      [](const Tensor& g, const Tensor&, const Tensor& o) { return div(g, mul(o, 2.0)); });
}
Tensor rsqrt(const Tensor& a) {
  return unary_op("rsqrt", a, UnaryOp::rsqrt, {}, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& o) {
                    return mul(g, mul(pow(o, 3.0), -0.5));
                  });
}
Tensor abs(const Tensor& a) {
  if (!is_floating(a.dtype())) return unary_raw("abs", a, UnaryOp::abs, {}, false);
  return unary_op("abs", a, UnaryOp::abs, {}, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) {
                    return mul(g, unary_raw("sign", x, UnaryOp::sign, {}, false));
                  });
}
Tensor tanh(const Tensor& a) {
  return unary_op("tanh", a, UnaryOp::tanh, {}, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& o) {
                    // Differentiable ops under create_graph, the fused kernel otherwise.
                    if (autograd::grad_enabled()) return mul(g, rsub(square(o), 1.0));
                    return binary_raw("tanh_backward", g, o, BinaryOp::tanh_backward, 1);
                  });
}
Tensor sigmoid(const Tensor& a) {
  return unary_op("sigmoid", a, UnaryOp::sigmoid, {}, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& o) {
                    // Differentiable ops under create_graph, the fused kernel otherwise.
                    if (autograd::grad_enabled()) return mul(g, mul(o, rsub(o, 1.0)));
                    return binary_raw("sigmoid_backward", g, o, BinaryOp::sigmoid_backward, 1);
                  });
}
Tensor relu(const Tensor& a) {
  if (!is_floating(a.dtype())) return unary_raw("relu", a, UnaryOp::relu, {}, false);
  return unary_op("relu", a, UnaryOp::relu, {}, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& o) {
                    // Differentiable ops under create_graph, the fused kernel otherwise.
                    if (autograd::grad_enabled())
                      return mul(g, gt(o.detach(), zeros_like(o)).to(g.dtype()));
                    return binary_raw("relu_backward", g, o, BinaryOp::relu_backward, 1);
                  });
}
Tensor sin(const Tensor& a) {
  return unary_op("sin", a, UnaryOp::sin, {}, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, cos(x)); });
}
Tensor cos(const Tensor& a) {
  return unary_op(
      "cos", a, UnaryOp::cos, {}, true, false,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return neg(mul(g, sin(x))); });
}
Tensor square(const Tensor& a) {
  if (!is_floating(a.dtype())) return unary_raw("square", a, UnaryOp::square, {}, false);
  return unary_op(
      "square", a, UnaryOp::square, {}, true, false,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, mul(x, 2.0)); });
}
Tensor reciprocal(const Tensor& a) {
  return unary_op(
      "reciprocal", a, UnaryOp::reciprocal, {}, false, true,
      [](const Tensor& g, const Tensor&, const Tensor& o) { return neg(mul(g, mul(o, o))); });
}
Tensor isnan(const Tensor& a) { return unary_raw("isnan", a, UnaryOp::isnan, {}, true); }
Tensor isfinite(const Tensor& a) { return unary_raw("isfinite", a, UnaryOp::isfinite, {}, true); }
Tensor logical_not(const Tensor& a) {
  Tensor b = a.dtype() == DType::boolean
                 ? a
                 : ne(a, zeros({}, TensorOptions(a.dtype()).with_device(a.device())));
  return unary_raw("logical_not", b, UnaryOp::logical_not, {}, false);
}

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  UnaryParams p{lo.value_or(nan), hi.value_or(nan)};
  if (!is_floating(a.dtype())) return unary_raw("clamp", a, UnaryOp::clamp, p, false);
  return unary_op("clamp", a, UnaryOp::clamp, p, true, false,
                  [lo, hi](const Tensor& g, const Tensor& x, const Tensor&) {
                    // Gradient passes where the input lies inside [lo, hi] (bounds included).
                    Tensor mask = ones_like(x);
                    auto opts = TensorOptions(x.dtype()).with_device(x.device());
                    if (lo) mask = mul(mask, ge(x, full({}, *lo, opts)).to(x.dtype()));
                    if (hi) mask = mul(mask, le(x, full({}, *hi, opts)).to(x.dtype()));
                    return mul(g, mask);
                  });
}

// ---- scalar operand ----
namespace {
Tensor scalar_op(const char* op, const Tensor& a0, UnaryOp uop, double s) {
  // An integral tensor with a fractional scalar computes in float32 (PyTorch's promotion).
  Tensor a = (!is_floating(a0.dtype()) && s != std::floor(s)) ? to_floating(a0) : a0;
  Tensor out = unary_raw(op, a, uop, {s, 0}, false);
  if (autograd::needs_grad({&a})) {
    SavedTensor so(uop == UnaryOp::rdiv_scalar ? out : Tensor(), op);
    SavedTensor si(uop == UnaryOp::rdiv_scalar || uop == UnaryOp::pow_scalar ? a : Tensor(), op);
    autograd::record_backward(op, {a}, {&out}, [uop, s, so, si](const Grads& g, const auto&) {
      switch (uop) {
        case UnaryOp::add_scalar:
          return Grads{g[0]};
        case UnaryOp::mul_scalar:
          return Grads{mul(g[0], s)};
        case UnaryOp::rsub_scalar:
          return Grads{neg(g[0])};
        case UnaryOp::rdiv_scalar:
          return Grads{neg(div(mul(g[0], so.unpack()), si.unpack()))};
        case UnaryOp::pow_scalar:
          if (s == 0) return Grads{zeros_like(g[0])};
          return Grads{mul(g[0], mul(pow(si.unpack(), s - 1), s))};
        default:
          EMBER_INTERNAL_ASSERT(false, "scalar op backward");
      }
      return Grads{};
    });
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, double b) { return scalar_op("add", a, UnaryOp::add_scalar, b); }
Tensor sub(const Tensor& a, double b) { return scalar_op("sub", a, UnaryOp::add_scalar, -b); }
Tensor mul(const Tensor& a, double b) { return scalar_op("mul", a, UnaryOp::mul_scalar, b); }
Tensor div(const Tensor& a, double b) {
  return scalar_op("div", to_floating(a), UnaryOp::mul_scalar, 1.0 / b);
}
Tensor pow(const Tensor& a, double e) {
  return scalar_op("pow", to_floating(a), UnaryOp::pow_scalar, e);
}
Tensor rsub(const Tensor& a, double b) { return scalar_op("rsub", a, UnaryOp::rsub_scalar, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) {
  return scalar_op("div", to_floating(b), UnaryOp::rdiv_scalar, a);
}
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }

// ---- where ----
Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  check_defined("where", cond, "condition");
  EMBER_CHECK(cond.dtype() == DType::boolean, "where: the condition must be a bool tensor, got ",
              dtype_name(cond.dtype()), "; compare first (e.g. gt(x, y))");
  DType common = promote_types(a0.dtype(), b0.dtype());
  Tensor a = a0, b = b0;
  {
    autograd::NoGradGuard ng;
    if (a.dtype() != common) a = a.to(common);
    if (b.dtype() != common) b = b.to(common);
  }
  Shape shape = broadcast_shapes("where", {cond.sizes(), a.sizes(), b.sizes()});
  Tensor out = empty(shape, common, a.device(), out_format(a.sizes() == shape ? a : b, shape));
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter("where", out, {cond, a, b});
    where_kernel().get(out.device().type, common)(it);
  }
  if (autograd::needs_grad({&a0, &b0})) {
    autograd::record_backward("where", {a0, b0}, {&out},
                              [c = cond.detach(), ta = InputInfo(a0), tb = InputInfo(b0)](
                                  const Grads& g, const auto& node) {
                                Tensor z = zeros(
                                    {}, TensorOptions(g[0].dtype()).with_device(g[0].device()));
                                Grads r(2);
                                if (node.needs_input_grad(0))
                                  r[0] = grad_for(where(c, g[0], z), ta);
                                if (node.needs_input_grad(1))
                                  r[1] = grad_for(where(c, z, g[0]), tb);
                                return r;
                              });
  }
  return out;
}

// ---- in place ----
namespace {
// Writes `result` (computed out of place, with its own backward node) into `self` and moves
// self's history onto that node. Out of place first keeps saved inputs intact.
Tensor& assign_inplace(const char* op, Tensor& self, const Tensor& result) {
  EMBER_CHECK(result.sizes() == self.sizes(), op, ": the result of shape ", result.shape_str(),
              " does not fit the in-place destination of shape ", self.shape_str());
  {
    autograd::NoGradGuard ng;
    self.copy_(result);
  }
  if (result.requires_grad()) {
    auto& meta = self.impl()->autograd;
    if (!meta) meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = result.grad_fn();
    meta->output_nr = result.impl()->autograd->output_nr;
  }
  return self;
}

void check_inplace(const char* op, const Tensor& self) {
  check_defined(op, self, "self");
  if (!autograd::grad_enabled()) return;
  EMBER_CHECK(!(self.requires_grad() && self.is_leaf()), op,
              ": a leaf tensor that requires grad "
              "(shape ",
              self.shape_str(),
              ") cannot be modified in place; wrap parameter updates in "
              "NoGradGuard or use the out-of-place op");
}

// f(self, other) computes the result out of place. On the differentiable path self (and other,
// when it shares self's storage) are cloned first, so values saved for backward stay intact.
template <typename OutOfPlace>
Tensor& inplace(const char* op, Tensor& self, const Tensor& other, OutOfPlace f) {
  check_inplace(op, self);
  if (autograd::needs_grad({&self, &other})) {
    Tensor old = self.clone();
    bool aliased = other.defined() && other.storage() == self.storage();
    return assign_inplace(op, self, f(old, aliased ? other.clone() : other));
  }
  return assign_inplace(op, self, f(self, other));
}
}  // namespace

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  // The common case (optimizers, accumulation): same shape/dtype, no autograd: one kernel, no
  // temporary.
  if (!autograd::needs_grad({&a, &b}) && a.defined() && b.defined() && a.dtype() == b.dtype() &&
      a.device() == b.device() &&
      (broadcasts_to(b.sizes(), a.sizes()) ||
       broadcast_shapes("add_", {a.sizes(), b.sizes()}) == a.sizes())) {
    if (a.numel() > 0) {
      ElementwiseIter it = make_elementwise_iter("add_", a, {a, b});
      binary_kernel().get(a.device().type, a.dtype())(it, BinaryOp::add, alpha);
    }
    a.bump_version();
    return a;
  }
  return inplace("add_", a, b,
                 [alpha](const Tensor& s, const Tensor& o) { return add(s, o, alpha); });
}
Tensor& sub_(Tensor& a, const Tensor& b, double alpha) { return add_(a, b, -alpha); }
Tensor& mul_(Tensor& a, const Tensor& b) {
  if (!autograd::needs_grad({&a, &b}) && a.defined() && b.defined() && a.dtype() == b.dtype() &&
      a.device() == b.device() &&
      (broadcasts_to(b.sizes(), a.sizes()) ||
       broadcast_shapes("mul_", {a.sizes(), b.sizes()}) == a.sizes())) {
    if (a.numel() > 0) {
      ElementwiseIter it = make_elementwise_iter("mul_", a, {a, b});
      binary_kernel().get(a.device().type, a.dtype())(it, BinaryOp::mul, 1);
    }
    a.bump_version();
    return a;
  }
  return inplace("mul_", a, b, [](const Tensor& s, const Tensor& o) { return mul(s, o); });
}
Tensor& div_(Tensor& a, const Tensor& b) {
  return inplace("div_", a, b, [](const Tensor& s, const Tensor& o) { return div(s, o); });
}
namespace {
Tensor& unary_inplace(const char* op, Tensor& a, UnaryOp uop, UnaryParams p,
                      const std::function<Tensor(const Tensor&)>& out_of_place) {
  if (!autograd::needs_grad({&a}) && a.defined()) {
    if (a.numel() > 0) {
      ElementwiseIter it = make_elementwise_iter(op, a, {a});
      unary_kernel().get(a.device().type, a.dtype())(it, uop, p);
    }
    a.bump_version();
    return a;
  }
  return inplace(op, a, Tensor(), [&](const Tensor& s, const Tensor&) { return out_of_place(s); });
}
}  // namespace
Tensor& add_(Tensor& a, double b) {
  return unary_inplace("add_", a, UnaryOp::add_scalar, {b, 0},
                       [b](const Tensor& s) { return add(s, b); });
}
Tensor& mul_(Tensor& a, double b) {
  return unary_inplace("mul_", a, UnaryOp::mul_scalar, {b, 0},
                       [b](const Tensor& s) { return mul(s, b); });
}
Tensor& relu_(Tensor& a) {
  return unary_inplace("relu_", a, UnaryOp::relu, {}, [](const Tensor& s) { return relu(s); });
}
Tensor& clamp_(Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return unary_inplace("clamp_", a, UnaryOp::clamp, {lo.value_or(nan), hi.value_or(nan)},
                       [lo, hi](const Tensor& s) { return clamp(s, lo, hi); });
}

}  // namespace ember
