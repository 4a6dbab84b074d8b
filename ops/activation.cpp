// leaky_relu, elu, gelu and silu: argument checks, output allocation, the backward node (which
// saves the input and calls the backward kernel). The kernel tables are in
// kernel_interface/activation.h.
#include "ember/ops/activation.h"

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

// grad_x = grad_y * f'(x), with grad_y brought to x's dtype (autograd may hand another one).
Tensor activation_backward_kernel_call(const Tensor& grad_y, const Tensor& x, ActivationOp op,
                                       double param) {
  Tensor g = grad_y.dtype() == x.dtype() ? grad_y : grad_y.to(x.dtype());
  Tensor grad_x = empty_like(x);
  if (grad_x.numel() == 0) return grad_x;
  ElementwiseIter it = make_elementwise_iter(activation_op_name(op), grad_x, {g, x});
  activation_backward_kernel().get(x.device().type, x.dtype())(it, op, param);
  return grad_x;
}

// f''(x) written with differentiable ops (undefined where it is zero): the derivative of the
// backward with respect to x.
Tensor activation_second_derivative(const Tensor& x, ActivationOp op, double param) {
  switch (op) {
    case ActivationOp::leaky_relu:
      return Tensor();
    case ActivationOp::elu: {
      // alpha * exp(x) on the non-positive side (the kernel's side at 0), 0 elsewhere.
      Tensor negative = logical_not(gt(x, zeros_like(x))).to(x.dtype());
      return mul(mul(exp(x), param), negative);
    }
    case ActivationOp::gelu: {
      // d/dx [Phi(x) + x phi(x)] = phi(x) (2 - x^2), phi the standard normal density.
      constexpr double kInvSqrt2Pi = 0.3989422804014327;
      Tensor phi = mul(exp(mul(square(x), -0.5)), kInvSqrt2Pi);
      return mul(phi, rsub(square(x), 2.0));
    }
    case ActivationOp::gelu_tanh: {
      // f'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u', u = k (x + c x^3), t = tanh(u);
      // f''(x) = (1 - t^2) (u' - x t u'^2 + 0.5 x u'').
      constexpr double k = 0.7978845608028654, c = 0.044715;
      Tensor x2 = square(x);
      Tensor u = mul(add(x, mul(mul(x2, x), c)), k);
      Tensor du = mul(add(mul(x2, 3 * c), 1.0), k);
      Tensor ddu = mul(x, 6 * c * k);
      Tensor t = tanh(u);
      Tensor inner = add(sub(du, mul(mul(x, t), square(du))), mul(mul(x, ddu), 0.5));
      return mul(rsub(square(t), 1.0), inner);
    }
    case ActivationOp::silu: {
      // f'(x) = s (1 + x (1 - s)); f''(x) = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x).
      Tensor s = sigmoid(x);
      Tensor ds = mul(s, rsub(s, 1.0));
      return mul(ds, add(mul(x, rsub(mul(s, 2.0), 1.0)), 2.0));
    }
  }
  return Tensor();
}

// grad_x = grad_y * f'(x) by the kernel. When grad_y or x requires grad (a create_graph backward)
// it records its own backward: d/dgrad_y is this function again and d/dx is
// grad * grad_y * f''(x), so activations have derivatives of every order.
Tensor activation_backward(const Tensor& grad_y, const Tensor& x, ActivationOp op, double param) {
  Tensor grad_x = activation_backward_kernel_call(grad_y.detach(), x.detach(), op, param);
  if (autograd::needs_grad({&grad_y, &x})) {
    const char* name = activation_op_name(op);
    autograd::SavedTensor saved_g(grad_y, name), saved_x(x, name);
    const DType g_dtype = grad_y.dtype();
    autograd::record_backward((std::string(name) + "_backward").c_str(), {grad_y, x}, {&grad_x},
                              [saved_g, saved_x, op, param, g_dtype](const std::vector<Tensor>& gg,
                                                                     const autograd::Node& node) {
                                const Tensor xv = saved_x.unpack();
                                std::vector<Tensor> r(2);
                                if (node.needs_input_grad(0)) {
                                  r[0] = activation_backward(gg[0], xv, op, param);
                                  if (r[0].dtype() != g_dtype) r[0] = r[0].to(g_dtype);
                                }
                                if (node.needs_input_grad(1)) {
                                  Tensor f2 = activation_second_derivative(xv, op, param);
                                  Tensor gy = saved_g.unpack();
                                  if (gy.dtype() != xv.dtype()) gy = gy.to(xv.dtype());
                                  r[1] = f2.defined() ? mul(mul(gg[0], gy), f2) : zeros_like(xv);
                                }
                                return r;
                              });
  }
  return grad_x;
}

Tensor activation(const Tensor& x, ActivationOp op, double param) {
  const char* name = activation_op_name(op);
  EMBER_CHECK(x.defined(), name, ": the input is an undefined tensor");
  EMBER_CHECK_STATUS(is_floating(x.dtype()), not_supported, name, ": input has dtype ",
                     dtype_name(x.dtype()), " (shape ", x.shape_str(),
                     "); activations need a floating dtype, convert with .to(DType::f32)");
  // Same shape and memory format as the input (empty_like preserves channels_last).
  Tensor y = empty_like(x);
  if (y.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter(name, y, {x});
    activation_kernel().get(x.device().type, x.dtype())(it, op, param);
  }
  if (autograd::needs_grad({&x})) {
    autograd::SavedTensor saved_x(x, name);
    autograd::record_backward(
        name, {x}, {&y}, [saved_x, op, param](const std::vector<Tensor>& g, const auto&) {
          return std::vector<Tensor>{activation_backward(g[0], saved_x.unpack(), op, param)};
        });
  }
  return y;
}

}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation(x, ActivationOp::leaky_relu, negative_slope);
}
Tensor elu(const Tensor& x, double alpha) { return activation(x, ActivationOp::elu, alpha); }
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return activation(
      x, approximate == GeluApproximation::tanh ? ActivationOp::gelu_tanh : ActivationOp::gelu,
      0.0);
}
Tensor silu(const Tensor& x) { return activation(x, ActivationOp::silu, 0.0); }

}  // namespace ember
