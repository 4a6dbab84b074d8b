// leaky_relu, elu, gelu and silu: argument checks, output allocation, the backward node (which
// saves the input and calls the backward kernel). The kernel tables are in
// kernel_interface/activation.h.
#include "ember/ops/activation.h"

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

// grad_x = grad_y * f'(x), with grad_y brought to x's dtype (autograd may hand another one).
Tensor activation_backward(const Tensor& grad_y, const Tensor& x, ActivationOp op, double param) {
  Tensor g = grad_y.dtype() == x.dtype() ? grad_y : grad_y.to(x.dtype());
  Tensor grad_x = empty_like(x);
  if (grad_x.numel() == 0) return grad_x;
  ElementwiseIter it = make_elementwise_iter(activation_op_name(op), grad_x, {g, x});
  activation_backward_kernel().get(x.device().type, x.dtype())(it, op, param);
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
